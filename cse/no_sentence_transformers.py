"""The sentence-transformers module of an export whose embedding no sentence-transformers module
computes (a pooler of intermediate layers, SARCSE's autoencoder Z, PromptBERT's denoised [MASK]
state): ``modules.json`` names it, so that ``SentenceTransformer(directory)`` is refused rather than
falling back, without ``modules.json``, to mean pooling over the backbone (another embedding).

This file is copied beside the export (:func:`cse.export.write_refusing_modules`); sentence-transformers
imports it only with ``trust_remote_code=True``, and then :class:`LoadWithCSE` refuses to load, saying
how the export loads. It imports nothing, so that it runs wherever it is copied.
"""

MESSAGE = (
    "this model's sentence embedding is not one sentence-transformers computes: load it with "
    "cse.modeling.load_model(directory), which encodes as the trained model did (see its README.md)"
)


class LoadWithCSE:
    """Refuses to be built or loaded, with :data:`MESSAGE`."""

    def __init__(self, *args, **kwargs):
        raise ValueError(MESSAGE)

    @classmethod
    def load(cls, *args, **kwargs):
        raise ValueError(MESSAGE)
