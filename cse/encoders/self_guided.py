"""SG-BERT's encoder (Kim, Yoo and Lee, ACL 2021): BERT_T, the frozen copy BERT_F whose layers give
the views that guide BERT_T's [CLS], and the projection head (the method: :mod:`cse.methods.sgbert`)."""

from __future__ import annotations

import copy

import torch

from ..errors import CSEUsageError
from ..losses.sgbert import ProjectionHead
from ..modeling import CSEModel, view_of
from ..pooling import masked_max, masked_mean

TOKEN_POOLINGS = ("max", "mean", "cls")
SAMPLERS = ("uniform", "uniform_per_batch")


class SelfGuidedEncoder(CSEModel):
    """BERT_T (``backbone``, its [CLS] before the pooling layer is c_i), BERT_F (``fixed_backbone``,
    a frozen copy taken at construction) and the projection head f (``projection_head``, or none).

    The training forward returns the projected c_i ``(b, D)``, the projected views ``(b, K, D)``
    (``sample_views``: one per sentence, drawn by ``sampler``; else every layer of ``layers``) and
    L_reg. The embedding forward, ``encode`` and ``save_pretrained`` are BERT_T's alone.
    """

    def __init__(
        self,
        backbone,
        tokenizer,
        token_pooling: str = "max",
        layers: list[int] | None = None,
        sample_views: bool = False,
        sampler: str = "uniform",
        projection_size: int | None = 4096,
        fixed_encoder_dropout: bool = False,
    ):
        super().__init__(backbone, tokenizer, pooler_type="cls_before_pooler")
        if token_pooling not in TOKEN_POOLINGS:
            raise CSEUsageError(f"token pooling must be one of {', '.join(TOKEN_POOLINGS)}, got {token_pooling!r}")
        if sampler not in SAMPLERS:
            raise CSEUsageError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
        embeddings = getattr(backbone, "embeddings", None)
        if embeddings is None:
            raise ValueError(f"{type(backbone).__name__} has no `embeddings` module (layer 0) to freeze")
        num_layers = self.config.num_hidden_layers + 1
        layers = list(range(num_layers)) if layers is None else list(layers)
        outside = [k for k in layers if not 0 <= k < num_layers]
        if outside:
            raise CSEUsageError(f"layers {outside} do not exist: the encoder has layers 0..{num_layers - 1}")
        self.token_pooling = token_pooling
        self.layers = layers
        self.sample_views = sample_views
        self.sampler = sampler
        self.fixed_encoder_dropout = fixed_encoder_dropout
        embeddings.requires_grad_(False)  # footnote 5: "we also freeze the 0th layer of BERT_T"
        self.fixed_backbone = copy.deepcopy(backbone).requires_grad_(False)
        std = getattr(self.config, "initializer_range", 0.02)
        head = None if projection_size is None else ProjectionHead(self.config.hidden_size, projection_size, std)
        self.projection_head = head
        # (theta_T, theta_F) lists for parameter_distance, built once: moving or loading the module
        # keeps its parameter objects, walking two encoders' modules costs a millisecond a step, and a
        # list built in the first compiled step would change a guard and recompile the second
        pairs = self.parameter_pairs()
        self._parameter_lists = ([t for _, t, _ in pairs], [f for _, _, f in pairs])
        self.train(self.training)

    @property
    def fixed_encoder_dropout(self) -> bool:
        """Whether BERT_F's dropout follows the model's mode (the released code's), rather than BERT_F
        staying deterministic (the paper's)."""
        return self.__dict__["_fixed_encoder_dropout"]

    @fixed_encoder_dropout.setter
    def fixed_encoder_dropout(self, value: bool) -> None:
        self.__dict__["_fixed_encoder_dropout"] = value
        self.training_changed()  # the next train() puts BERT_F in the mode this setting gives it

    def set_training(self, mode: bool) -> None:
        super().set_training(mode)
        # The Trainer puts the whole model in training mode every step; BERT_F stays deterministic.
        if not self.fixed_encoder_dropout:
            self.fixed_backbone.eval()

    def parameter_pairs(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        """(name, theta_T, theta_F) for BERT_T's trainable parameters: the others equal BERT_F's."""
        fixed = dict(self.fixed_backbone.named_parameters())
        return [(name, p, fixed[name]) for name, p in self.backbone.named_parameters() if p.requires_grad]

    def parameter_distance(self) -> torch.Tensor:
        """L_reg = ||theta_F - theta_T||_2^2, in float32 (float64 for float64 weights): one multi-tensor
        difference and norm over all parameters."""
        dtype = torch.promote_types(self._parameter_lists[0][0].dtype, torch.float32)  # _foreach_norm refuses to narrow
        norms = torch._foreach_norm(torch._foreach_sub(*self._parameter_lists), 2, dtype=dtype)
        return torch.stack(norms).pow(2).sum()

    def layer_views(self, hidden_states, attention_mask) -> torch.Tensor:
        """h_{i,k} = p(H_{i,k}) for k in ``layers``: ``(b, K, d)``."""
        pool = {
            "max": lambda h: masked_max(h, attention_mask),
            "mean": lambda h: masked_mean(h, attention_mask),
            "cls": lambda h: h[:, 0],
        }[self.token_pooling]
        return torch.stack([pool(hidden_states[k]) for k in self.layers], dim=1)

    def sample(self, views: torch.Tensor) -> torch.Tensor:
        """sigma: one view per sentence, uniform over the layer set, ``(b, 1, d)``."""
        b, num_views = views.shape[:2]
        draws = 1 if self.sampler == "uniform_per_batch" else b
        index = torch.randint(num_views, (draws,), device=views.device).expand(b)
        return views[torch.arange(b, device=views.device), index][:, None]

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.projection_head is None else self.projection_head(x)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> dict[str, torch.Tensor]:
        """``(b, 2, length)`` token ids (the collator's two identical copies): view 0 goes through
        BERT_T, view 1 through BERT_F."""
        c = self.sentence_embedding(self.pooler_type, *view_of(0, input_ids, attention_mask, token_type_ids))
        ids, mask, types = view_of(1, input_ids, attention_mask, token_type_ids)
        with torch.no_grad():
            fixed = self.backbone_outputs(ids, mask, types, backbone=self.fixed_backbone, hidden_states=True)
            views = self.layer_views(fixed.hidden_states, mask)
            if self.sample_views:
                views = self.sample(views)
        return {
            "embeddings": self.project(c),
            "views": self.project(views),
            "parameter_distance": self.parameter_distance(),
        }
