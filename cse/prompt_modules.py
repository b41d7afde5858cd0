"""sentence-transformers' modules of a prompt embedding (:mod:`cse.prompts`): ``SentenceTransformer(dir,
trust_remote_code=True)`` on a PromptBERT export embeds as :func:`cse.modeling.load_model` does.

* :class:`PromptTransformer`, module 0: the backbone's ``Transformer``, each sentence put inside the
  template's text first (:func:`cse.prompts.template_input`: the evaluation's string, a period
  appended); the text is ``prompt_config.json`` beside the model.
* :class:`MaskPooling`, module 1: the last hidden state at the (last) mask token of each input.

This file and ``prompts.py`` (torch only) are copied beside the exported model (:mod:`cse.export`),
and sentence-transformers imports them from there, with ``trust_remote_code=True`` only.
"""

from __future__ import annotations

import json
import os

from torch import nn

try:  # where sentence-transformers keeps it now; its earlier releases name it only as models.Transformer
    from sentence_transformers.base.modules import Transformer
except ImportError:
    from sentence_transformers.models import Transformer

from .prompts import last_mask_states, template_input

PROMPT_CONFIG_NAME = "prompt_config.json"
CONFIG_NAME = "config.json"


def save_prompt_config(directory: str, text: str) -> None:
    """The template's text (``*sent_0*`` where the sentence goes) for :class:`PromptTransformer`."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, PROMPT_CONFIG_NAME), "w", encoding="utf-8") as f:
        json.dump({"template_text": text}, f, indent=2)


class PromptTransformer(Transformer):
    """sentence-transformers' ``Transformer`` whose text inputs go inside the template's text."""

    prompt_text = ""

    def preprocess(self, inputs, prompt=None, **kwargs):
        inputs = [template_input(self.prompt_text, x) if isinstance(x, str) else x for x in inputs]
        return super().preprocess(inputs, prompt=prompt, **kwargs)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs):
        module = super().load(model_name_or_path, subfolder=subfolder, **kwargs)
        with open(os.path.join(model_name_or_path, subfolder, PROMPT_CONFIG_NAME), encoding="utf-8") as f:
            module.prompt_text = json.load(f)["template_text"]
        return module

    def save(self, output_path: str, *args, **kwargs) -> None:
        super().save(output_path, *args, **kwargs)
        save_prompt_config(output_path, self.prompt_text)


class MaskPooling(nn.Module):
    """The features' ``token_embeddings`` at each input's last mask token -> ``sentence_embedding``."""

    def __init__(self, mask_token_id: int, dimension: int):
        super().__init__()
        self.mask_token_id, self.dimension = mask_token_id, dimension

    def forward(self, features: dict) -> dict:
        features["sentence_embedding"] = last_mask_states(
            features["token_embeddings"], features["input_ids"], self.mask_token_id
        )
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return self.dimension

    def save(self, output_path: str, *args, **kwargs) -> None:
        os.makedirs(output_path, exist_ok=True)
        with open(os.path.join(output_path, CONFIG_NAME), "w", encoding="utf-8") as f:
            json.dump({"mask_token_id": self.mask_token_id, "dimension": self.dimension}, f, indent=2)

    @staticmethod
    def load(input_path: str) -> MaskPooling:
        with open(os.path.join(input_path, CONFIG_NAME), encoding="utf-8") as f:
            config = json.load(f)
        return MaskPooling(config["mask_token_id"], config["dimension"])
