"""Whether the quick start may remove its earlier results before it starts afresh.

``python scripts/earlier_quickstart.py RUN BASE``: exit 0 when RUN is absent or a run directory of this
package (its ``run_args.json`` says so, :func:`cse.run_dir.run_format`) and BASE is absent or holds the
base model's results file alone, saying what will be removed; otherwise one ``error:`` and one
``hint:`` line, exit 2: a folder that holds anything else is the user's, and nothing is removed.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cse.run_dir import run_format  # noqa: E402

BASE_RESULTS = "sts_test_results.json"


def a_folder(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def main(run: str, base: str) -> int:
    earlier_run = not os.path.lexists(run) or (a_folder(run) and run_format(run) is not None)
    earlier_base = not os.path.lexists(base) or (a_folder(base) and set(os.listdir(base)) <= {BASE_RESULTS})
    if not (earlier_run and earlier_base):
        print(
            f"error: {run if not earlier_run else base} holds files that are not an earlier quick start's",
            file=sys.stderr,
        )
        print("hint: move them away (the quick start writes its run and results there), then rerun", file=sys.stderr)
        return 2
    present = [path for path in (run, base) if os.path.lexists(path)]
    if present:
        print(f"removing the earlier quick start's {' and '.join(present)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
