"""Parts: what a paper adds to SimCSE's base, as an object with a few named hooks.

SimCSE's base is two dropout views of each sentence, one encoder and InfoNCE over the batch. A
method's part changes or extends it: AdCSE's momentum encoder of the positives and its adversaries,
MixCSE's mixed negatives, V-advCSE's virtual-adversarial term, SARCSE's autoencoder and its
reconstruction, SG-BERT's self-guidance. A method's preset is the list of its one part; a
composition (``run_cse.py --parts a,b``) is a list of several. :class:`cse.trainer.CSETrainer`
runs one step program over the list it holds::

    corpus   = the tokenised corpus, then part.corpus(corpus)  once  (ESimCSE's repeated views,
                                                                     PromptBERT's templates)
    batch    = the collator's two views, then part.views(batch)         (their views stacked)
    outputs  = model(**batch)            the encoder (part.encoder) and its wrappers (part.wrap:
                                         V-advCSE's head, AdCSE's momentum encoder of the positives)
    terms    = loss's terms of the two views (InfoNCE; part.loss replaces it: MixCSE, or extends
               it: AdCSE's adversaries; none where a part replaces the whole base: SG-BERT)
    terms   += part.terms(step)          named, weighted terms (V-advCSE's lambda L_vadv, SARCSE's
                                         beta L_R and gamma L_R+, SG-BERT's objective)
    terms    = part.weigh(terms)         SARCSE's alpha on every other term (Eq. 12)
    loss     = sum(terms); backward; clip; optimizer step
    part.after_step(trainer)             AdCSE's adversaries' ascent and momentum update

Each part implements only the hooks it needs. A part never names another part or tests its type:
what it needs to know of the others is which slots (:data:`SLOTS`) they replace, and what of the
batch and the model (:data:`NEEDS`) they need or change. Two parts combine unless they replace the
same slot, one of them refuses a slot the other replaces (:attr:`Part.refuses`), or one needs what
the other changes (:attr:`Part.needs`, :attr:`Part.changes`); a set of parts combines when each pair
does (:func:`why_not`).

The parts of a run are applied in the order of their names (``adcse`` before ``mixcse``), whatever
order the command names them in: the rule depends on the parts alone, so a composition computes the
same whichever way it is spelled.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch

# What a part may replace; two parts that replace the same thing do not combine.
SLOTS = {
    "views": "the training batch (two dropout views of each sentence)",
    "embedding": "the sentence embedding (the pooler after the backbone)",
    "positives": "the encoder of the positive view",
    "softmax": "the contrastive loss's softmax (InfoNCE's columns)",
}
# What a part may need of the batch and the model, which another part's change would break: a part
# declares what it needs (Part.needs) and what it changes (Part.changes); two such do not combine.
NEEDS = {
    "token_inputs": "the backbone's word-embedding input to have the batch's shape (one position per token of each "
    "view's input_ids)",
}
EVERY_PART = "*"  # a key of Part.refuses and Part.notes: every other part
BASE_EQUATION = (
    "L_cont = -(1/N) sum_i log( e^{s(h_i, h_i+)/tau} / sum_j e^{s(h_i, h_j+)/tau} ), h_i and h_i+ the two "
    "dropout views' embeddings, s the cosine (SimCSE, Gao et al. 2021)"
)


def total(terms: Mapping[str, Any]):
    """The sum of the terms, left to right, with no operator beyond the additions."""
    return functools.reduce(operator.add, terms.values())


class StepLoss(NamedTuple):
    """A batch's loss as the step program gives it: ``terms``, the weighted terms by name
    (``term_<t>`` in the log), whose sum (:func:`total`) is the loss; ``statistics``, scalars for
    the training log; ``outputs``, the model's training forward's (``embeddings``: the two views')."""

    terms: dict[str, torch.Tensor]
    statistics: dict[str, torch.Tensor]
    outputs: dict


@dataclass
class Step:
    """One batch's step program so far, as a part's :meth:`Part.terms` reads it.

    ``model`` is the model as the Trainer calls it (under DDP the wrapped one, whose backward syncs
    the gradients); ``encoder`` the model itself, for extra forwards whose gradients join the same
    backward (V-advCSE's perturbed anchors). ``outputs`` is the training forward's output
    (``embeddings``: ``(batch, 2, d)``, and what the encoder adds, such as SARCSE's reconstruction);
    ``terms`` and ``statistics`` are those of the loss and of the parts before this one."""

    model: torch.nn.Module
    encoder: torch.nn.Module
    inputs: dict
    outputs: dict
    terms: dict
    statistics: dict


class Part:
    """What one paper adds to SimCSE's base. A subclass declares the class attributes and overrides
    the hooks it needs; an instance holds its flags (``args``, an instance of :attr:`Flags`) and the
    run's model arguments (``model_args``: the temperature, the backbone).

    Declarations (the record of the method reads them; ``cse.registry``):

    - ``name``: how ``--parts`` names it; ``display_name``: how the model card does.
    - ``citation``: the paper's BibTeX entry (a ``title`` field is required); ``docs``: its page,
      relative to the repository root (a page of your own for a part outside it).
    - ``equation``: what it changes or adds, in one sentence (docs/composition.md).
    - ``Flags``: the dataclass of its flags (each field a ``--flag``), or None.
    - ``replaces``: the :data:`SLOTS` it replaces; ``refuses``: a slot (or :data:`EVERY_PART`) ->
      why it does not combine with a part that replaces it; ``notes``: a slot -> what a
      combination with a part that replaces it computes beyond the two equations.
    - ``needs``: the :data:`NEEDS` it relies on (V-advCSE perturbs the word embeddings token by
      token: ``token_inputs``); ``changes``: those it breaks (a part that adds template or prompt
      tokens inside the model changes ``token_inputs``). A pair of which one needs what the other
      changes is refused before any work.

    Hooks, in the order a run calls them (each a no-op here):

    - before the build: :meth:`conflict`, :meth:`prepare_run`;
    - the build (:func:`cse.build.build`): :meth:`encoder`, :meth:`wrap`, :meth:`loss`;
    - the batch: :meth:`views` (in the collator);
    - the trainer's construction: :meth:`setup`; the start of ``train()``: :meth:`load_state_dict`
      (a resumed run), then :meth:`begin`; once the model is wrapped: :meth:`train_begin`; each
      optimizer step: :meth:`step_begin`, then the step program's :meth:`terms` and :meth:`weigh`,
      then :meth:`after_step` (all of them inside the captured step under ``--cuda_graphs``, unless
      :meth:`capture_problem` says why not);
    - state: :meth:`state_dict` (each checkpoint, one file for all parts: :mod:`cse.parts_state`),
      :meth:`load_state_dict` (a resumed run, and a run whose training had ended, for its export),
      :meth:`export` (beside the exported model);
    - evaluation: :meth:`selection_pooler`, :meth:`analysis`; diagnostics: :meth:`readings`.
    """

    name: ClassVar[str] = ""
    display_name: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    docs: ClassVar[str] = ""
    equation: ClassVar[str] = ""
    Flags: ClassVar[type | None] = None
    replaces: ClassVar[frozenset[str]] = frozenset()
    refuses: ClassVar[Mapping[str, str]] = {}
    notes: ClassVar[Mapping[str, str]] = {}
    needs: ClassVar[frozenset[str]] = frozenset()
    changes: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, args=None, model_args=None):
        self.args = args if args is not None or self.Flags is None else self.Flags()
        self.model_args = model_args

    # --- before the build ---------------------------------------------------------------------

    def conflict(self, others: list[Part]) -> str | None:
        """Why these settings do not combine with the other parts of the run (judged by what they
        replace), checked before any work; None if they do."""
        return None

    def prepare_run(self, data_args, training_args) -> list:
        """Set up what the run needs before its corpus is read (a default corpus, say); returns the
        Trainer callbacks the part adds (early stopping, say)."""
        return []

    # --- the build ------------------------------------------------------------------------------

    def encoder(self, model_args):
        """The encoder whose forward gives the sentence embedding, for a part that replaces the
        ``embedding`` slot: a :class:`cse.embedding_encoder.EmbeddingEncoder` (the encoder hook, which
        training, evaluation and export call), or a :class:`~cse.modeling.CSEModel` whose embedding stays
        a pooled backbone (SG-BERT's BERT_T); None: the pretrained backbone with SimCSE's pooler."""
        return None

    def wrap(self, model, replaced: frozenset[str]):
        """The model after this part's wrapper (applied after the encoder, parts in order);
        ``replaced``: the slots the run's other parts replace."""
        return model

    def loss(self, loss, model, replaced: frozenset[str]):
        """The contrastive loss after this part, from the one before it (InfoNCE, or the loss of the
        part that replaces the softmax, which goes first); ``replaced`` as in :meth:`wrap`. None: the
        part gives the whole objective through :meth:`terms`."""
        return loss

    # --- the batch ------------------------------------------------------------------------------

    def corpus(self, tokenized, tokenizer, data_args, training_args):
        """The tokenised training corpus (a ``datasets.Dataset``, a row a sentence) with the columns
        this part's :meth:`views` read, computed once before training, e.g. with a cached
        ``tokenized.map`` (ESimCSE's repeated view of each sentence; PromptBERT's templated views,
        which replace the sentence's own columns); a column's name ends with the column it is a view
        of (:func:`cse.batches.column_kind`). For views that depend on each sentence alone: what
        differs from batch to batch belongs in :meth:`views`."""
        return tokenized

    def views(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The training batch after this part remade its views (in the data loader, on the CPU): the
        sentence's own columns as ``(batch, 2, length)`` tensors, the columns a part added to the corpus
        (:meth:`corpus`) as ``(batch, length)``, which the part that reads them takes out; a part whose
        encoder and loss read more views may give more (CoT-BERT's three templates). A part whose corpus
        columns replace the sentence's own (PromptBERT's) makes the batch's ``input_ids`` and
        ``attention_mask`` here."""
        return batch

    # --- the trainer ----------------------------------------------------------------------------

    def setup(self, trainer) -> None:
        """At the trainer's construction: refuse what the run cannot do, place the part's modules."""

    def begin(self, trainer, resumed: bool) -> None:
        """At the start of ``train()``, after a resumed run (``resumed``) has handed the part its state
        (:meth:`load_state_dict`): start what a new run starts (SARCSE counts the token frequencies)."""

    def train_begin(self, trainer) -> None:
        """Once the model is wrapped, cast and loaded (the Trainer's ``on_train_begin``)."""

    def step_begin(self, trainer) -> None:
        """Before each optimizer step's first forward."""

    def terms(self, step: Step) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The named, weighted terms this part adds to the loss for the batch, and its statistics."""
        return {}, {}

    def weigh(self, terms: dict) -> tuple[dict, dict]:
        """The terms (tensors, or their weights as numbers) after this part weighs the others' (SARCSE's
        alpha), and statistics of them."""
        return terms, {}

    def term_weights(self) -> dict[str, float]:
        """The weight of each term :meth:`terms` gives (a term is its weight times its raw value)."""
        return {}

    def after_step(self, trainer) -> None:
        """Right after the optimizer step (not after one an fp16 overflow skipped: see the trainer)."""

    def parameters(self) -> list[torch.Tensor]:
        """Tensors the part trains outside the model and the Trainer's optimizer."""
        return []

    def capture_problem(self) -> str | None:
        """Why a step with this part cannot be captured as a CUDA graph (``--cuda_graphs``: a read of a
        value on the host, say), or None: then the step runs eagerly, and the run says why."""
        return None

    # --- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors without which a resumed run would not continue the same run (beyond the model's
        weights and the Trainer's state, which the Trainer keeps): the trainer writes them into every
        checkpoint, under ``<name>.<key>`` (:mod:`cse.parts_state`). The tensors themselves, on any
        device: the trainer copies them to the CPU."""
        return {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Take back :meth:`state_dict`'s tensors from a checkpoint, on the run's device: on resume,
        before :meth:`begin`, and when a run whose training had ended completes its export. ``state``
        is empty where the checkpoint holds none for the part: one that needs its state refuses it."""

    def export(self, trainer, directory: str) -> None:
        """Write what the part keeps beside the exported model into ``directory``."""

    # --- evaluation and diagnostics -------------------------------------------------------------

    def selection_pooler(self) -> str | None:
        """The pooler of the model-selection evaluation, if not the model's evaluation pooler."""
        return None

    def analysis(self, suite, embeddings: dict) -> dict[str, float]:
        """Scalars computed from an evaluation's sentence embeddings (``{sentence: vector}``)."""
        return {}

    def readings(self, trainer, model, inputs) -> dict[str, dict[str, float]]:
        """Further per-batch readings for ``python -m cse.diagnostics``: ``{key: {name: value}}``, each
        group reported under its key (its mean over the batches)."""
        return {}


# --- which parts combine ------------------------------------------------------------------------


def said_of(said: Mapping[str, str], other: type[Part]) -> list[str]:
    """What ``refuses`` or ``notes`` say of a part ``other``: under each slot it replaces, then under
    :data:`EVERY_PART`."""
    return [said[key] for key in [*sorted(other.replaces), EVERY_PART] if key in said]


def why_not(a: type[Part], b: type[Part]) -> str | None:
    """Why parts ``a`` and ``b`` do not combine, or None if they do: a part that refuses every other
    says why first, then a part that refuses what the other replaces, then a need of one that the
    other changes, then a slot both replace."""
    pairs = ((a, b), (b, a))
    reasons = [x.refuses[EVERY_PART] for x, _ in pairs if EVERY_PART in x.refuses]
    reasons += [reason for x, y in pairs for reason in said_of(x.refuses, y)]
    needed = [(x, y, need) for x, y in pairs for need in sorted(x.needs & y.changes)]
    reasons += [f"{x.name} needs {NEEDS[need]}, which {y.name} changes" for x, y, need in needed]
    if reasons:
        return reasons[0]
    shared = sorted(a.replaces & b.replaces)
    if shared:
        return f"both replace {SLOTS[shared[0]]}"
    return None


def pairs_refused(parts: list[type[Part]]) -> list[tuple[type[Part], type[Part], str]]:
    """Each pair of ``parts`` that does not combine, with the reason."""
    return [(a, b, reason) for a, b in itertools.combinations(parts, 2) if (reason := why_not(a, b))]


def replaced_by_others(parts: list[Part], part: Part) -> frozenset[str]:
    """The slots the parts of the run other than ``part`` replace."""
    return frozenset(slot for other in parts if other is not part for slot in other.replaces)
