"""``run_cse.py --help`` without ``--parts``: the parts, and how to list their flags. It imports
nothing, so that run_cse.py answers before torch and transformers load (a second, against half a
minute for a cold import of them). :data:`PARTS` is :func:`cse.registry.part_names`
(tests/test_composition.py checks it); a script registering a part of its own lists it too
(:func:`cse.composition.requested_parts` passes the registry's names)."""

from __future__ import annotations

PARTS = ("adcse", "esimcse", "mixcse", "sarcse", "sgbert", "vadvcse")


def overview(names: tuple[str, ...] | list[str] = PARTS) -> str:
    return (
        "usage: run_cse.py [CONFIG] --parts PART[,PART...] --model_name_or_path MODEL --train_file CORPUS\n"
        "                  --output_dir DIR [flags]\n\n"
        f"Parts from different papers on SimCSE's InfoNCE (docs/composition.md): {', '.join(names)}.\n"
        "A part alone is its method's preset: --parts mixcse is run_mixcse.py.\n\n"
        "A part's flags, then the shared ones (model, data, training):  run_cse.py --parts mixcse --help\n"
        "A composition's:                                               run_cse.py --parts mixcse,vadvcse --help\n"
    )


def wants_overview(argv: list[str]) -> bool:
    """Whether ``argv`` asks for help without naming parts (a leading config file may name them)."""
    asks = any(arg in ("-h", "--help") for arg in argv)
    names = any(arg == "--parts" or arg.startswith("--parts=") for arg in argv)
    return asks and not names and not (argv and not argv[0].startswith("-"))
