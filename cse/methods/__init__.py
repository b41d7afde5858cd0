"""One module per method: its flags, its part (:mod:`cse.parts`: the hooks and its paper) and its
record (:mod:`cse.registry`). A method's encoder classes live in :mod:`cse.encoders`, its loss in
``cse.losses`` (both importable without the trainer); a method added later may keep its own in its
module. The methods stand beside the trainer, which runs their parts; none imports it. Nothing else
lists the methods: a module here is found by importing the package, and the files that list them are
generated from the records (:mod:`cse.listings`) or checked against them by the tests."""
