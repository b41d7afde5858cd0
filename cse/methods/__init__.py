"""One module per method: its argument dataclass, its ``CSETrainer`` subclass and its record
(:mod:`cse.registry`); the loss lives in ``cse.losses``."""
