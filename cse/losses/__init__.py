"""Contrastive objectives, one module each, hyperparameters as constructor arguments."""

from .infonce import InfoNCELoss, cosine_logits

__all__ = ["InfoNCELoss", "cosine_logits"]
