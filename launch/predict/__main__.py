import sys

from launch.predict.cli import main

sys.exit(main())
