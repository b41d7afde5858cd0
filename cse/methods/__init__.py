"""One module per method: its part (:mod:`cse.parts`: the hooks, its flags and paper), the trainer
class of its preset for code that imports it, and its record (:mod:`cse.registry`); its loss lives
in ``cse.losses``."""
