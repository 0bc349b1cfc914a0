import sys

from poprun_py.cli import main

sys.exit(main())
