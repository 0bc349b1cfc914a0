import sys

from launch.train.cli import main

sys.exit(main())
