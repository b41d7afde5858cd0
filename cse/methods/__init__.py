"""One module per method: its part (:mod:`cse.parts`: the hooks, its flags and paper), the trainer
class of its preset for code that imports it, and its record (:mod:`cse.registry`). The loss of a
method reproduced here lives in ``cse.losses`` (importable without the trainer); a method added
later may keep its own in its module. Nothing else lists the methods: a module here is found by
importing the package, and the files that list them are generated from the records
(:mod:`cse.listings`) or checked against them by the tests."""
