#!/usr/bin/env python
"""Parts from different papers in one run: SimCSE's two dropout views and InfoNCE as the base, and the
named parts on top (docs/composition.md). A single part is its method's preset (``--parts mixcse`` is
``run_mixcse.py``).

python run_cse.py --parts mixcse,vadvcse --model_name_or_path bert-base-uncased --output_dir result/mix_vadv
python run_cse.py --parts adcse,mixcse --adcse_variant released --mixcse_variant paper ...
python run_cse.py --parts mixcse --help      # MixCSE's flags, then the shared ones
"""

import sys

from cse.parts_overview import overview, wants_overview

if __name__ == "__main__" and wants_overview(sys.argv[1:]):
    print(overview(), end="")  # answered before torch and transformers are imported
    sys.exit(0)

from cse.composition import main  # noqa: E402
from cse.errors import run_cli  # noqa: E402

if __name__ == "__main__":
    run_cli(main)
