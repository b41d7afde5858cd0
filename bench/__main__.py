import sys

from cse.errors import run_cli

from .run import main

sys.exit(run_cli(main))
