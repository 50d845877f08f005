"""EfficientBERT's warm-up-KD supernet (Dong et al., 2021; docs/reference.md#efficientbert).

The supernet of a space holds every candidate at its largest: for EfficientBERT, N = 4
stacked FFNs at ratio r = 1 in every layer. The warm-up trains it, with the standard
FFN expression, against the teacher by knowledge distillation on unlabeled text
(WikiText-2 plus the task's training sentences without labels): the MSE of pre-softmax
attention scores and the MSE of hidden states, the student's hidden states mapped to
the teacher's width by the space's own learned ``fit`` layer (its aux node), student
layer m matched to teacher layer g(m) (the uniform map: layers spread evenly). No MLM
loss and no prediction loss (γ = 0 in pre-training). A candidate then inherits the
supernet's weights (:func:`nas.builder.extract_child`: the first N FFNs, the leading r·H
inner units) and needs only a short distillation to be scored.

The warm-up is cached by everything that determines it (the teacher, the space, the
warm-up architecture, the text and the settings) under ``<cache>/warmup/`` and resumes
from its checkpoint when interrupted; a finished entry is found again without loading
anything. The losses are those of :mod:`nas.distill.tinybert` (same terms, same
masking), the loop is :class:`nas.train.Trainer`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from nas.config import ConfigError, check_fields
from nas.distill.general import TextDistillSettings
from nas.distill.init import EMBEDDING_INITS
from nas.distill.tinybert import Terms, intermediate_loss
from nas.errors import NasError
from nas.seeding import seed_stage
from nas.train import TrainSettings, loop_settings

if TYPE_CHECKING:
    from nas.network import GraphNet

log = logging.getLogger("nas.warmup")

#: Bump when the warm-up changes, so that cached supernets are not reused.
WARMUP_VERSION = 1
#: The warm-up's terms: attention and hidden MSE, no embedding loss
#: (docs/reference.md#efficientbert).
WARMUP_TERMS = Terms(embedding=False, attention=True, hidden=True)


# ------------------------------------------------------------------------ fit layer


def fit_edge(net: GraphNet) -> str:
    """The key of the edge into a net's aux ``fit`` node (the width map to the teacher)."""
    graph = net.graph
    aux = [n for n, a in graph.nodes(data=True) if a.get("role") == "aux"]
    edges = [f"{src}->{dst}" for dst in aux for src, _ in graph.in_edges(dst)]
    found = [k for k in edges if k in net.edges]
    if len(found) != 1:
        raise NasError(f"the warm-up needs exactly one learned fit edge into an aux node of the "
                       f"space's graph; found {found or 'none'}; give the space a 'fit' aux node")
    return found[0]


class SpaceFit(nn.Module):
    """The space's ``fit`` layer as TinyBERT's shared W_h: ``hidden`` maps any student
    hidden state to the teacher's width. It holds the net's own linear, so the weights
    trained here are the ones a child inherits (no separate map to carry around)."""

    embedding = None  # the warm-up has no embedding loss

    def __init__(self, net: GraphNet) -> None:
        super().__init__()
        edge: Any = net.edges[fit_edge(net)]  # the fit edge's linear op
        self.hidden: nn.Linear = edge.dense

    @property
    def out_features(self) -> int:
        return int(self.hidden.out_features)


def kd_loss(net: nn.Module, batch: Mapping[str, torch.Tensor], teacher: nn.Module,
            mapping: Sequence[int], fit: SpaceFit, arch: Mapping[str, Any] | None = None,
            terms: Terms = WARMUP_TERMS, with_logits: bool = False
            ) -> tuple[torch.Tensor, dict[str, float], Any, Any]:
    """Attention + hidden KD of ``net`` (run at ``arch`` when it is a supernet) against
    ``teacher`` on ``batch``: ``(loss, logged terms, student output, teacher output)``."""
    with torch.no_grad():
        t = teacher(batch, record=terms.records)
    kwargs = {"arch": arch} if arch is not None else {}
    s = net(batch, record=terms.records, **kwargs)
    loss, info = intermediate_loss(s, t, fit, mapping, terms)
    return loss, info, s, (t if with_logits else None)


# ------------------------------------------------------------------------ architectures


def warmup_arch(space: Any) -> Any:
    """The largest model with the default expressions: depth and width choices at their
    largest value, every other choice at its default (docs/reference.md#efficientbert: N = 4, r = 1,
    standard FFN)."""
    values = dict(space.default())
    for c in space.choices():
        if c.kind in ("depth", "width"):
            values[c.name] = c.largest()
    return space.validate(values)


def sample_under_budget(space: Any, fixed: Mapping[str, Any], rng: np.random.Generator,
                        kinds: tuple[str, ...] = ("depth", "width"),
                        max_params: float | None = None, seq_len: int = 128,
                        tries: int = 10_000) -> Any:
    """A uniform random architecture over the choices of ``kinds`` (the others from
    ``fixed``) whose parameter count (:func:`nas.cost.count_costs`, the fast graph count)
    is within ``max_params``; rejection sampling, as EfficientBERT's stage 3 samples
    sub-networks (docs/reference.md#efficientbert)."""
    from nas.cost import count_costs

    free = [c for c in space.choices() if c.kind in kinds]
    for _ in range(tries):
        values = {**fixed, **{c.name: c.sample(rng) for c in free}}
        try:
            arch = space.validate(values)
        except NasError:
            continue
        if max_params is None or count_costs(space, arch, seq_len).params <= max_params:
            return arch
    raise ConfigError(f"no architecture with {', '.join(kinds)} choices sampled at random fits "
                      f"max_params={max_params} in {tries} tries; raise the budget")


def check_teacher_fits(space: Any, teacher: Mapping[str, Any]) -> None:
    """Attention maps are compared head by head, and M student layers map onto N >= M
    teacher layers; the fit layer must end at the teacher's width. ``teacher``: the
    teacher's configuration in Hugging Face names (``num_attention_heads``...)."""
    cfg, t = space.config, teacher
    if cfg.get("heads") != t["num_attention_heads"]:
        raise ConfigError(f"space.heads is {cfg.get('heads')}, the teacher has "
                          f"{t['num_attention_heads']}: the attention loss compares heads one "
                          f"to one; set space.heads to {t['num_attention_heads']}")
    if cfg.get("layers", 0) > t["num_hidden_layers"]:
        raise ConfigError(f"space.layers is {cfg.get('layers')}, the teacher has "
                          f"{t['num_hidden_layers']}: use at most as many layers as the teacher")
    if cfg.get("fit_size") != t["hidden_size"]:
        raise ConfigError(f"space.fit_size is {cfg.get('fit_size')}, the teacher's hidden size "
                          f"is {t['hidden_size']}; set space.fit_size to {t['hidden_size']}")


# ------------------------------------------------------------------------- the warm-up


@dataclass
class WarmupSettings(TextDistillSettings):
    """The warm-up (docs/reference.md#efficientbert): distillation of the largest supernet on
    unlabeled text.

    ``embedding_init``: ``teacher-pca`` starts the word embeddings from the teacher's,
    factorised to the embedding width (:mod:`nas.distill.init`; an adaptation to a CPU
    budget, as AdaBERT and TinyBERT here: the paper's warm-up runs long enough on
    Wikipedia to learn a 30k-word table, a thousand steps on a CPU do not); ``random``
    is the paper's start.
    """

    no_text = "the warm-up needs text"

    checkpoint_every: int = 100
    embedding_init: str = "teacher-pca"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("embedding_init", self.embedding_init in EMBEDDING_INITS,
                       " or ".join(EMBEDDING_INITS))], self)

    def train_settings(self) -> TrainSettings:
        return loop_settings(self)


@dataclass
class WarmupResult:
    """A warmed-up supernet: its weights file and the cache entry's record."""

    weights: Path
    record: dict[str, Any]

    def load(self, space: Any) -> nn.Module:
        """The supernet of ``space`` with the warm-up weights, in eval mode. The global RNG
        is left as it was (building draws initial weights that the load overwrites), so a
        caller's seeded stage does not depend on whether it loaded the supernet."""
        from nas.builder import build_supernet
        from nas.cache import load_weights

        with torch.random.fork_rng(devices=[]):
            net = build_supernet(space)
        load_weights(net, self.weights)
        return net.eval()


def warmup_corpus(space: Any, settings: WarmupSettings, tokenizer: Any, task: str,
                  task_train: Any, data_dir: str | None) -> Any:
    from nas.distill.general import text_corpus

    s = settings
    return text_corpus(tokenizer, task=task, task_train=task_train, corpus=s.corpus,
                       splits=s.corpus_splits, task_sentences=s.task_sentences,
                       max_texts=s.max_texts, max_seq_len=s.max_seq_len, seed=s.seed,
                       data_dir=data_dir)


def warmup_supernet(space: Any, teacher_dir: str, settings: WarmupSettings, *, task: str,
                    task_train: Any, data_dir: str | None = None, corpus: Any = None,
                    progress: bool = False) -> WarmupResult:
    """The warmed-up supernet of ``space`` against the teacher in ``teacher_dir``, cached.

    The key hashes the teacher's identity, the space's configuration, the warm-up
    architecture, the text's fingerprint and ``settings``; an interrupted warm-up resumes
    from its checkpoint, and one process at a time trains an entry (others wait).
    """
    from nas.cache import cache_root, exclusive, hold_shared, read_record, settings_key
    from nas.teacher import teacher_identity
    from nas.tokenization import load_tokenizer

    tokenizer = load_tokenizer(teacher_dir)
    if corpus is None:
        corpus = warmup_corpus(space, settings, tokenizer, task, task_train, data_dir)
    arch = warmup_arch(space)
    teacher_id = teacher_identity(teacher_dir)
    key = settings_key(teacher=teacher_id, space=space.name, config=space.config,
                       arch=dict(arch), text=corpus.fingerprint, settings=asdict(settings),
                       version=WARMUP_VERSION)
    folder = cache_root() / "warmup" / f"{space.name}-{key}"
    weights, result_file = folder / "supernet.safetensors", folder / "result.json"
    trained = False
    if not result_file.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        with exclusive(folder / ".lock", f"the supernet warm-up {folder}"):
            if not result_file.is_file():
                _train(space, arch, teacher_dir, settings, corpus, tokenizer, folder,
                       {"key": key, "teacher": teacher_dir, "teacher_id": teacher_id}, progress)
                trained = True
    if not trained:
        log.info("supernet warm-up from the cache (%s)", folder)
    hold_shared(folder)  # the run loads the weights later: `nas cache clear` leaves them
    record = {**read_record(result_file), "from_cache": not trained}
    return WarmupResult(weights, record)


def _train(space: Any, arch: Any, teacher_dir: str, settings: WarmupSettings, corpus: Any,
           tokenizer: Any, folder: Path, record: dict[str, Any], progress: bool) -> None:
    from nas.builder import build_supernet
    from nas.cache import save_weights
    from nas.checkpoint import atomic_write_json
    from nas.distill.general import seeded_batches, token_lengths
    from nas.distill.losses import layer_map
    from nas.hf import load_teacher_as_design
    from nas.train import Trainer

    s = settings
    teacher_space, teacher = load_teacher_as_design(teacher_dir)
    check_teacher_fits(space, teacher_space.config)
    for p in teacher.parameters():
        p.requires_grad_(False)
    seed_stage(s.seed, "warmup")
    supernet = build_supernet(space)
    if s.embedding_init == "teacher-pca":
        from nas.distill.init import init_embeddings, teacher_embedding_init

        width = supernet.word_embeddings().shape[1]
        init_embeddings(supernet, teacher_embedding_init(teacher_dir, width))
    fit = SpaceFit(supernet)
    mapping = layer_map(space.config["layers"], teacher_space.config["num_hidden_layers"])
    lengths = token_lengths(tokenizer, corpus, s.max_seq_len)
    steps_per_epoch = math.ceil(len(corpus) / s.batch_size)
    fixed = dict(arch)

    def loss(net: nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        value, info, _, _ = kd_loss(net, batch, teacher, mapping, fit, arch=fixed)
        return value, info

    log.info("supernet warm-up: %d texts (%s), %d steps per epoch, teacher layers %s",
             len(corpus), corpus.sources[0], steps_per_epoch, mapping)
    result = Trainer(supernet, s.train_settings(),
                     seeded_batches(corpus, tokenizer, s.batch_size, s.max_seq_len, s.seed,
                                    "warmup", lengths),
                     steps_per_epoch, loss, checkpoint=folder / "checkpoint.safetensors",
                     progress=progress, desc="supernet warm-up").fit()
    save_weights(supernet, folder / "supernet.safetensors")
    atomic_write_json(folder / "result.json", {
        **record, "arch": dict(arch), "texts": len(corpus), "tokens": int(lengths.sum()),
        "source": corpus.sources[0], "steps": result.steps,
        "train_seconds": round(result.seconds, 1), "history": result.history,
        "mapping": mapping, "settings": asdict(s)})  # last: marks the entry complete
    (folder / "checkpoint.safetensors").unlink(missing_ok=True)


__all__ = ["SpaceFit", "WarmupResult", "WarmupSettings", "check_teacher_fits", "kd_loss",
           "sample_under_budget", "warmup_arch", "warmup_supernet"]
