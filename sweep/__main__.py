from cse.errors import run_cli

from .cli import main

raise SystemExit(run_cli(main))
