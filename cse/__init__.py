"""cse: unsupervised contrastive sentence embeddings (SimCSE and the papers built on it) on the
Hugging Face Trainer, with one SentEval-protocol evaluator for all of them."""

__version__ = "0.1.0"
