"""Contrastive objectives, one module each, hyperparameters as constructor arguments."""

from .infonce import InfoNCELoss, LogitBlock, cosine_logits, mean_cross_entropy

__all__ = ["InfoNCELoss", "LogitBlock", "cosine_logits", "mean_cross_entropy"]
