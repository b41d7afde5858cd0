"""One module per method: its argument dataclass and its ``CSETrainer`` subclass (the loss lives in
``cse.losses``)."""
