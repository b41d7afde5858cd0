"""What the benchmark runs: the model shapes of each profile and, for each method, the run script and
paper configuration it is timed with (its record's ``bench``, :class:`cse.registry.BenchShape`).

Every method is timed at its own paper shapes (batch, max_seq_length), read from its
``configs/<method>_*.yaml``: the bench only swaps in a random backbone of the profile's size and
switches off everything that is not a training step (evaluation, saving, mixed precision it did
not ask for).
"""

from __future__ import annotations

from dataclasses import dataclass

from cse import registry
from cse.registry import BenchShape

# the method every overhead is measured against: the base the others extend
BASELINE = next(record.name for record in registry.records() if record.base)
# Not a method of this package but sentence-transformers' recipe for SimCSE's objective (bench/st_mnrl.py),
# timed at SimCSE's shapes as a reference line; it trains only.
SENTENCE_TRANSFORMERS = "st-mnrl"

# One full reproduction run: an epoch of wiki1m (1,000,000 sentences) at batch 64, STS-B dev + SICK-R
# trial every 125 steps (SimCSE's protocol, which the papers here follow).
FULL_RUN_STEPS = 15_625
FULL_RUN_EVALS = FULL_RUN_STEPS // 125


@dataclass(frozen=True)
class Profile:
    device: str  # "cpu" or "cuda"
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    warmup_steps: int
    steps: int
    eval_repeats: int
    methods: tuple[str, ...]
    bf16: bool
    # each method's steps beside a hand-written loop's, interleaved (bench.overhead)
    hand_loop: bool = False
    # flags every method's run script gets on this profile
    run_args: tuple[str, ...] = ()

    def backbone_config(self) -> dict:
        return {
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
        }


COMPOSITION = "adcse+mixcse"

# Every method's variants as its record declares them (cse.registry), the baseline first,
# sentence-transformers' recipe and a composition of two parts.
METHODS = {
    name: shape
    for record in sorted(registry.records(), key=lambda record: record.name != BASELINE)
    for name, shape in record.bench.items()
} | {
    SENTENCE_TRANSFORMERS: BenchShape("bench.st_mnrl", "configs/simcse_bert_base.yaml", "bert", evaluates=False),
    # a composition (run_cse.py) at SimCSE's configuration: AdCSE's momentum encoder and adversaries, MixCSE's
    # mixed negatives
    COMPOSITION: BenchShape("cse.composition", "configs/simcse_bert_base.yaml", "bert", ("--parts", "adcse,mixcse")),
}

# the methods of this package (sentence-transformers' recipe has no step program to write by hand)
METHODS_TRAINED = tuple(name for name in METHODS if name != SENTENCE_TRANSFORMERS)

PROFILES = {
    # compute negligible: the Trainer's own cost per step against a hand-written loop's
    "cpu-micro": Profile(
        "cpu",
        1,
        8,
        2,
        32,
        warmup_steps=10,
        steps=60,
        eval_repeats=0,
        methods=METHODS_TRAINED,
        bf16=False,
        hand_loop=True,
        # SDPA's CPU kernel with a padding mask costs more than the rest of this model's step together
        run_args=("--attn_implementation", "eager"),
    ),
    "cpu-tiny": Profile(
        "cpu", 2, 128, 2, 512, warmup_steps=3, steps=20, eval_repeats=3, methods=tuple(METHODS), bf16=False
    ),
    # all-MiniLM-L6-v2's shape
    "cpu-minilm": Profile(
        "cpu", 6, 384, 12, 1536, warmup_steps=2, steps=10, eval_repeats=1, methods=tuple(METHODS), bf16=False
    ),
    "gpu-base": Profile(
        "cuda", 12, 768, 12, 3072, warmup_steps=20, steps=50, eval_repeats=2, methods=tuple(METHODS), bf16=True
    ),
    "gpu-large": Profile(
        "cuda", 24, 1024, 16, 4096, warmup_steps=10, steps=30, eval_repeats=1, methods=(BASELINE,), bf16=True
    ),
}
