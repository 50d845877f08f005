"""TinyBERT's Transformer-distillation objective, composed from the losses of
:mod:`nas.distill.losses` (docs/reference.md#tinybert).

L_model = Σ_{m=0}^{M+1} λ_m · L_layer(S_m, T_g(m)) with λ_m = 1: the embedding loss
(m = 0), for each student layer m = 1…M the attention-score and hidden-state losses
against teacher layer g(m), and the prediction loss on the logits (m = M+1), used in
its own stage. Each term can be switched off (the ablations of TinyBERT's Table 6).

Both models are :class:`~nas.network.GraphNet` children of the ``bert`` family, which
record ``embeddings``, ``hidden_states`` and pre-softmax ``attention_scores`` when asked
(``spaces/bert.py``); the teacher is loaded into that design with
:func:`nas.hf.load_teacher_as_design`, since ``transformers`` 5.x returns no pre-softmax
scores.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from nas.distill.general import TextDistillSettings
from nas.distill.losses import FitMap, attention_mse, fit_mse, soft_cross_entropy
from nas.errors import NasError
from nas.network import ModelOutput

log = logging.getLogger("nas.tinybert")


@dataclass(frozen=True)
class Terms:
    """Which intermediate terms of L_model are used."""

    embedding: bool = True
    attention: bool = True
    hidden: bool = True

    @property
    def records(self) -> tuple[str, ...]:
        """The states a forward pass must record for these terms."""
        return tuple(kind for kind, on in (("embeddings", self.embedding),
                                           ("attention_scores", self.attention),
                                           ("hidden_states", self.hidden)) if on)

    @property
    def any(self) -> bool:
        return self.embedding or self.attention or self.hidden


class FitMaps(nn.Module):
    """TinyBERT's learned width maps, trained with the student and dropped after
    distillation: W_e for the embeddings, W_h (one matrix shared by every layer) for the
    hidden states. Identities without parameters when the widths agree."""

    def __init__(self, student_dim: int, teacher_dim: int) -> None:
        super().__init__()
        self.embedding = FitMap(student_dim, teacher_dim)
        self.hidden = FitMap(student_dim, teacher_dim)


class Fits(Protocol):
    """The width maps :func:`intermediate_loss` reads: :class:`FitMaps`, or the warm-up's
    :class:`~nas.distill.warmup.SpaceFit` (the space's own fit layer, no embedding map)."""

    @property
    def embedding(self) -> nn.Module | None: ...

    @property
    def hidden(self) -> nn.Module: ...


class DistillStudent(nn.Module):
    """The student with its fit maps: what the intermediate stages train (one state dict,
    so a checkpoint carries both)."""

    def __init__(self, student: nn.Module, student_dim: int, teacher_dim: int) -> None:
        super().__init__()
        self.student = student
        self.fits = FitMaps(student_dim, teacher_dim)

    def forward(self, batch: dict[str, torch.Tensor], record: Sequence[str] = ()) -> ModelOutput:
        return self.student(batch, record=tuple(record))


def intermediate_loss(student: ModelOutput, teacher: ModelOutput, fits: Fits,
                      mapping: Sequence[int], terms: Terms
                      ) -> tuple[torch.Tensor, dict[str, float]]:
    """Σ of the enabled terms, and each term's value for the log.

    * embedding: MSE(E_S·W_e, E_T);
    * attention: Σ_m MSE(A_S^m, A_T^{g(m)}) on pre-softmax scores, masked entries zeroed;
    * hidden: Σ_m MSE(H_S^m·W_h, H_T^{g(m)}).

    ``mapping`` lists g(m) for m = 1…M (1-based teacher layers, :func:`layer_map`).
    """
    if not terms.any:
        raise NasError("intermediate distillation needs at least one of the embedding, "
                       "attention and hidden losses")
    s, t = student.records, teacher.records
    parts: dict[str, torch.Tensor] = {}
    if terms.embedding:
        parts["embedding"] = fit_mse(s["embeddings"][0], t["embeddings"][0], fits.embedding)
    for kind, name in (("attention_scores", "attention"), ("hidden_states", "hidden")):
        if not getattr(terms, name):
            continue
        if len(s[kind]) != len(mapping) or max(mapping) > len(t[kind]):
            raise NasError(f"layer mapping {list(mapping)} does not fit {len(s[kind])} "
                           f"student and {len(t[kind])} teacher layers")
        if name == "attention":
            values = [attention_mse(s[kind][m], t[kind][g - 1]) for m, g in enumerate(mapping)]
        else:
            values = [fit_mse(s[kind][m], t[kind][g - 1], fits.hidden)
                      for m, g in enumerate(mapping)]
        parts[name] = torch.stack(values).sum()
    total = torch.stack(list(parts.values())).sum()
    return total, {k: float(v.detach()) for k, v in parts.items()}


def prediction_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """L_pred = −softmax(z_T/t)·log_softmax(z_S/t), summed over classes, mean over the
    batch (docs/reference.md#tinybert; t = 1 by default)."""
    return soft_cross_entropy(student_logits, teacher_logits, temperature)


# ------------------------------------------------------------- general distillation

#: Bump when general distillation changes, so that cached students are not reused.
GENERAL_VERSION = 1


@dataclass
class GeneralSettings(TextDistillSettings):
    """General distillation (TinyBERT §3.2) on unlabeled text; ``enabled: false`` skips
    it (the ablation)."""

    no_text = "general distillation needs text"

    enabled: bool = True
    checkpoint_every: int = 200



def general_distillation(g: GeneralSettings, *, teacher: str | None, space: Any,
                         space_name: str, init: str, layer_mapping: str, task: str,
                         task_train: Any, data_dir: str | None, progress: bool
                         ) -> tuple[Path, dict[str, Any]]:
    """General distillation (TinyBERT §3.2): the student of ``space`` (with its width
    maps) learns the *pre-trained* ``teacher``'s embeddings, attention scores and hidden
    states on unlabeled text (WikiText-2 plus the task's training sentences); cached.

    Returns the weights file (a :class:`~nas.distill.tinybert.DistillStudent` state) and
    the result record. The cache key hashes the pre-trained teacher's identity, the
    student's shape and initialisation, the text and the settings; a finished entry is
    found again without loading anything, an interrupted one resumes from its checkpoint.
    """
    from nas.cache import cache_root, cached_entry, settings_key
    from nas.distill.general import text_corpus
    from nas.teacher import resolve_teacher, teacher_identity
    from nas.tokenization import load_tokenizer

    tokenizer = load_tokenizer(resolve_teacher(teacher))  # the pre-trained teacher's
    corpus = text_corpus(tokenizer, task=task, task_train=task_train, corpus=g.corpus,
                         splits=g.corpus_splits, task_sentences=g.task_sentences,
                         max_texts=g.max_texts, max_seq_len=g.max_seq_len, seed=g.seed,
                         data_dir=data_dir)
    teacher_id = teacher_identity(teacher)
    settings = {k: v for k, v in asdict(g).items() if k != "enabled"}
    key = settings_key(
        teacher=teacher_id, space=space_name, student=space.config, init=init,
        text=corpus.fingerprint, settings=settings, layer_mapping=layer_mapping,
        version=GENERAL_VERSION)
    folder = cache_root() / "general" / f"{space_name}-{key}"
    record, _ = cached_entry(folder, "general distillation", lambda: _general_train(
        g, teacher, space, init, layer_mapping, corpus, tokenizer, folder, key, settings,
        progress))
    return folder / "student.safetensors", record


def _general_train(g: GeneralSettings, teacher_name: str | None, space: Any, init: str,
                   layer_mapping: str, corpus: Any, tokenizer: Any, folder: Path, key: str,
                   settings: dict[str, Any], progress: bool) -> dict[str, Any]:
    """The training of stage 3 (see :func:`general_distillation`); returns the record."""
    from nas.cache import save_weights
    from nas.distill.general import seeded_batches, token_lengths
    from nas.distill.losses import layer_map
    from nas.hf import load_teacher_as_design
    from nas.seeding import seed_stage
    from nas.teacher import resolve_teacher, teacher_identity
    from nas.train import Trainer, loop_settings

    seed_stage(g.seed, "general")
    teacher_space, teacher = load_teacher_as_design(resolve_teacher(teacher_name))
    model = initial_student(space, teacher_space.config["hidden_size"], teacher_name, init)
    for p in teacher.parameters():
        p.requires_grad_(False)
    mapping = layer_map(space.config["num_hidden_layers"],
                        teacher_space.config["num_hidden_layers"], layer_mapping)
    terms = Terms()
    lengths = token_lengths(tokenizer, corpus, g.max_seq_len)
    steps_per_epoch = math.ceil(len(corpus) / g.batch_size)

    def loss(net: DistillStudent, batch: dict[str, torch.Tensor]) -> Any:
        with torch.no_grad():
            t = teacher(batch, record=terms.records)
        return intermediate_loss(net(batch, terms.records), t, model.fits, mapping, terms)

    log.info("general distillation on %d texts (%s), %d steps per epoch",
             len(corpus), corpus.sources[0], steps_per_epoch)
    result = Trainer(model, loop_settings(g),
                     seeded_batches(corpus, tokenizer, g.batch_size, g.max_seq_len, g.seed,
                                    "general", lengths),
                     steps_per_epoch, loss, checkpoint=folder / "checkpoint.safetensors",
                     progress=progress, desc="general distillation").fit()
    save_weights(model, folder / "student.safetensors")
    return {"key": key, "teacher": resolve_teacher(teacher_name),
            "teacher_id": teacher_identity(teacher_name),
            "texts": len(corpus), "tokens": int(lengths.sum()), "source": corpus.sources[0],
            "steps": result.steps, "train_seconds": round(result.seconds, 1),
            "history": result.history, "mapping": mapping, "settings": settings}


def initial_student(space: Any, teacher_dim: int, teacher: str | None = None,
                    init: str = "random") -> DistillStudent:
    """A fresh student with its width maps (call after seeding the stage); with ``init``
    ``teacher-pca``, word embeddings from the pre-trained ``teacher``'s principal
    components (the weights of a later stage are loaded over it: ``random``)."""
    from nas.builder import build_child
    from nas.distill.init import init_embeddings, teacher_embedding_init

    student = build_child(space)
    if init == "teacher-pca":
        init_embeddings(student, teacher_embedding_init(teacher, space.config["hidden_size"]))
    return DistillStudent(student, space.config["hidden_size"], teacher_dim)


__all__ = ["DistillStudent", "FitMaps", "GeneralSettings", "Terms", "general_distillation",
           "initial_student", "intermediate_loss", "prediction_loss"]
