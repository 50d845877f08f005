"""``blockwise``: how well each sliced block of a teacher imitates the teacher's block, and a
proxy score built from it (Puzzle, Bercovich et al. 2025, §3; docs/reference.md#teacher-compression;
docs/compress.md#blockwise).

The table (:func:`block_table`), for the ``bert-subnet`` space whose supernet is the
(importance-sorted) teacher: for each hidden width, each layer and each per-layer option
(skipped, or kept with a share of its heads and a share of its FFN neurons), the
normalised MSE of the sliced block's output against the teacher's block output ``y``,
given the teacher's own input ``x`` to that block sliced to the width's leading channels::

    NMSE = Σ_tokens (‖block'(x[:h]) − y[:h]‖² + ‖y[h:]‖²) / Σ_tokens ‖y‖²

over the unpadded tokens of a calibration sample. The channels a width ``h`` drops count
as outputs of zero (the second term), so that errors at different widths compare and the
knapsack's outer loop over widths can weigh a narrower residual stream against fewer
heads or neurons (Puzzle keeps the width fixed). A skipped layer passes its input on, so
its error is that of ``x[:h]`` against ``y``. Puzzle trains each candidate block by
local distillation first; here the block is the teacher's own slice (no training), which
is what the inherited child starts from. The teacher's block inputs and outputs are
computed once and cached (kind ``block-activations`` of the engine cache, safetensors),
keyed by the teacher's weights (:func:`nas.cache.weights_fingerprint`), the task and the
sample.

Each option also has its cost: its parameters (:func:`nas.cost.count_costs`) and, with a
``latency_fn`` (:func:`nas.latency.space_predictor`), its predicted batch-1 latency. Both
are additive over layers: a layer's parameters and op calls depend on the width and its
own choices only, and the latency model is linear in the op times and the call count
(:mod:`nas.latency`). So a child's cost is the width's base (embeddings, head, the
skipped layers' selectors) plus one contribution per layer, each measured as the cost of
the child keeping that layer alone minus the base. The table checks this on the full
child (:class:`BlockwiseError` when it does not hold).

The evaluator scores any architecture of the space in microseconds: the negated sum of
its layers' block errors (a cheap proxy for a searcher). The multiple-choice knapsack that
picks one option per layer under a budget is :mod:`evaluators.blockwise_knapsack`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evaluators.base import (
    EVALUATORS,
    EvalResult,
    Evaluator,
    EvaluatorError,
    Objective,
    Trial,
    TrialPruned,
)
from nas.architecture import Architecture
from nas.errors import NasError

if TYPE_CHECKING:  # torch only when a table is built; listing evaluators stays cheap
    import torch

    from nas.network import GraphNet
    from nas.space import SearchSpace

log = logging.getLogger("nas.blockwise")

#: The cache kind of the teacher's block inputs and outputs (a folder of ``cache_root()``).
CACHE_KIND = "block-activations"
#: The option of a skipped layer; a kept layer's option is ``(heads share, FFN share)``.
SKIP = "skip"
#: The cost a budget may limit when none is named.
COSTS = ("params", "latency_ms")

Option = str | tuple[str, str]


class BlockwiseError(NasError):
    """A teacher, space, sample or budget the blockwise table cannot use."""


@dataclass
class BlockTable:
    """Block errors and costs of a ``bert-subnet`` space, by width, layer and option.

    ``error[w, i, c]``: the NMSE of layer ``i``'s option ``options[c]`` at width
    ``widths[w]``; ``costs[name][w, i, c]`` its cost contribution (0 for a skipped layer)
    and ``base[name][w]`` the cost of the rest of the child at that width (so a child
    costs ``base + Σ_i costs[i, c_i]``); ``teacher`` the full child's costs; ``seconds``
    how long each part of the table took.
    """

    space: SearchSpace
    widths: tuple[int, ...]
    options: tuple[Option, ...]
    error: np.ndarray
    costs: dict[str, np.ndarray]
    base: dict[str, np.ndarray]
    teacher: dict[str, float]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def layers(self) -> int:
        return int(self.error.shape[1])

    def choose(self, arch: Mapping[str, Any]) -> tuple[int, list[int]]:
        """``(width index, option index per layer)`` of ``arch``, an architecture of this
        space or of its ``layers="first"`` twin (one ``num_hidden_layers`` choice)."""
        try:
            w = self.widths.index(int(arch["hidden_size"]))
            picked = []
            for i in range(self.layers):
                kept = (i < int(arch["num_hidden_layers"]) if "num_hidden_layers" in arch
                        else int(arch[f"L{i}_keep"]) == 1)
                option = (str(arch[f"L{i}_heads"]), str(arch[f"L{i}_ffn"])) if kept else SKIP
                picked.append(self.options.index(option))
        except (KeyError, ValueError) as err:
            raise BlockwiseError(f"blockwise: {dict(arch)} is not an architecture of the "
                                 f"table's bert-subnet space ({err})") from None
        return w, picked

    def error_of(self, arch: Mapping[str, Any]) -> float:
        """The summed block error of ``arch``'s layers."""
        w, picked = self.choose(arch)
        return float(sum(self.error[w, i, c] for i, c in enumerate(picked)))

    def cost_of(self, arch: Mapping[str, Any], name: str) -> float:
        """``arch``'s cost ``name`` from the table (the base plus each layer's share)."""
        if name not in self.costs:
            raise BlockwiseError(f"blockwise: the table has no {name!r} cost (it has "
                                 f"{', '.join(self.costs)}); build it with a latency_fn")
        w, picked = self.choose(arch)
        return float(self.base[name][w] + sum(self.costs[name][w, i, c]
                                              for i, c in enumerate(picked)))

    def architecture(self, w: int, picked: Sequence[int]) -> Architecture:
        """The architecture of the space with width ``widths[w]`` and these options."""
        values: dict[str, Any] = {"hidden_size": self.widths[w]}
        for i, c in enumerate(picked):
            option = self.options[c]
            heads, ffn = ("1", "1") if isinstance(option, str) else option  # str: SKIP
            values.update({f"L{i}_keep": int(option != SKIP), f"L{i}_heads": heads,
                           f"L{i}_ffn": ffn})
        return self.space.validate(values)


# ---------------------------------------------------------------------------
# the teacher's block inputs and outputs, cached
# ---------------------------------------------------------------------------


def _check_space(space: SearchSpace) -> None:
    if space.config.get("family") != "bert-subnet" or space.config.get("layers") != "any":
        raise BlockwiseError("blockwise: the table needs the bert-subnet space with "
                             "layers='any' (spaces.bert_subnet.from_teacher or from_design)")


def _batches_on(batches: Iterable[Mapping[str, torch.Tensor]], device: Any) -> list[dict]:
    return [{k: v.to(device) for k, v in b.items() if hasattr(v, "to")} for b in batches]


def _mask(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    import torch

    mask = batch.get("attention_mask")
    return (torch.ones_like(batch["input_ids"]) if mask is None else mask).to(torch.float32)


def teacher_states(supernet: torch.nn.Module, space: SearchSpace, batches: list[dict]
                   ) -> list[torch.Tensor]:
    """Per batch, the teacher's hidden states ``(L + 1, B, T, H)``: the embeddings and
    each layer's output, so block ``i`` reads state ``i`` and writes state ``i + 1``."""
    import torch

    full = dict(space.default())
    out = []
    with torch.no_grad():
        for b in batches:
            rec = supernet(b, arch=full, record=("embeddings", "hidden_states")).records
            out.append(torch.stack([*rec["embeddings"], *rec["hidden_states"]]))
    return out


def activations_key(teacher: str, task: str, sample: str, samples: int, seed: int) -> str:
    """The cache key of a teacher's block states: its weights' fingerprint, the task, the
    sample (a hash of its tokens), its size and the seed it was drawn with."""
    from nas.cache import settings_key

    return settings_key(kind=CACHE_KIND, teacher=teacher, task=task, sample=sample,
                        samples=samples, seed=seed)


def _sample_hash(batches: list[dict]) -> str:
    import hashlib

    h = hashlib.sha256()
    for b in batches:
        for k in ("input_ids", "attention_mask", "token_type_ids"):
            if k in b:
                h.update(k.encode() + b[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def cached_states(supernet: torch.nn.Module, space: SearchSpace, batches: list[dict], *,
                  task: str | None, seed: int = 0, cache_dir: str | Path | None = None
                  ) -> tuple[list[torch.Tensor], bool]:
    """``(teacher_states, from_cache)``: with ``task``, cached in the engine cache under
    kind ``block-activations`` (safetensors; see :func:`activations_key`)."""
    if task is None:
        return teacher_states(supernet, space, batches), False
    from nas.cache import cache_root, cached_entry, load_tensors, weights_fingerprint
    from nas.checkpoint import save_safetensors

    samples = sum(int(b["input_ids"].shape[0]) for b in batches)
    teacher = weights_fingerprint(supernet)
    sample = _sample_hash(batches)
    folder = cache_root(cache_dir) / CACHE_KIND / activations_key(teacher, task, sample,
                                                                  samples, seed)
    path = folder / "states.safetensors"

    def compute() -> dict[str, Any]:
        start = time.perf_counter()
        states = teacher_states(supernet, space, batches)
        save_safetensors({f"batch{j}": s.detach().cpu().contiguous()
                          for j, s in enumerate(states)}, path)
        return dict(teacher=teacher, task=task, sample=sample, samples=samples, seed=seed,
                    batches=len(states), seconds=round(time.perf_counter() - start, 3))

    record, _ = cached_entry(folder, "teacher block states", compute)
    tensors = load_tensors(path, device=str(batches[0]["input_ids"].device))
    if len(tensors) != len(batches):
        raise BlockwiseError(f"{path}: holds {len(tensors)} batches, the sample has "
                             f"{len(batches)}; clear the cache kind {CACHE_KIND!r}")
    return [tensors[f"batch{j}"] for j in range(len(batches))], bool(record["from_cache"])


# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------


def layer_options(space: SearchSpace) -> tuple[Option, ...]:
    """The options of one layer: skipped, then every (heads share, FFN share)."""
    heads = [str(v) for v in space.choice_map["L0_heads"].values]
    ffn = [str(v) for v in space.choice_map["L0_ffn"].values]
    return (SKIP, *[(h, f) for h in heads for f in ffn])


def _block_errors(supernet: GraphNet, space: SearchSpace, batches: list[dict],
                  states: list[torch.Tensor], widths: Sequence[int],
                  options: Sequence[Option]) -> np.ndarray:
    """``error[w, i, c]`` (see the module docstring). A layer's attention runs once per
    heads share, and its FFN and output once per (heads, FFN) pair, on the cached input.
    The batches are the innermost loop, so each option's plan is made once (the
    supernet keeps only the last 256 plans; 600 options cycled per batch would miss)."""
    import torch

    layers = int(space.config["num_hidden_layers"])
    sums = np.zeros((len(widths), layers, len(options)))
    norms = np.zeros((len(widths), layers))
    base: dict[str, Any] = {f"L{i}_keep": 1 for i in range(layers)}
    masks = [_mask(b)[..., None] for b in batches]
    with torch.no_grad():
        for w, h in enumerate(widths):
            for i in range(layers):
                src = "emb" if i == 0 else f"L{i - 1}_x"
                # the channels a narrower width drops count as outputs of zero
                dropped = 0.0
                for s, m in zip(states, masks, strict=True):
                    norms[w, i] += float((s[i + 1].pow(2) * m).sum())
                    dropped += float((s[i + 1][..., h:].pow(2) * m).sum())
                attn: dict[tuple[str, int], torch.Tensor] = {}
                for c, option in enumerate(options):
                    sums[w, i, c] = dropped
                    arch = {**base, "hidden_size": h}
                    if not isinstance(option, str):  # a kept layer (str: SKIP)
                        arch.update({f"L{i}_heads": option[0], f"L{i}_ffn": option[1]})
                    for j, (b, s, m) in enumerate(zip(batches, states, masks, strict=True)):
                        x, y = s[i][..., :h], s[i + 1][..., :h]
                        if isinstance(option, str):  # SKIP
                            out = x
                        else:
                            if (option[0], j) not in attn:
                                attn[option[0], j] = supernet.run_nodes(
                                    b, arch, {src: x}, [f"L{i}_attn"])[f"L{i}_attn"]
                            out = supernet.run_nodes(
                                b, arch, {src: x, f"L{i}_attn": attn[option[0], j]},
                                [f"L{i}_ffn_h", f"L{i}_ffn_a", f"L{i}_out"])[f"L{i}_out"]
                        sums[w, i, c] += float(((out - y).pow(2) * m).sum())
    return sums / np.maximum(norms, 1e-30)[..., None]


CostFn = Callable[[Mapping[str, Any]], float]


def _cost_fns(space: SearchSpace, seq_len: int, latency_fn: CostFn | None
              ) -> dict[str, CostFn]:
    from nas.cost import count_costs

    fns: dict[str, CostFn] = {
        "params": lambda arch: float(count_costs(space, space.validate(arch), seq_len).params)}
    if latency_fn is not None:
        fns["latency_ms"] = lambda arch: float(latency_fn(space.validate(arch)))
    return fns


def _block_costs(space: SearchSpace, widths: Sequence[int], options: Sequence[Option],
                 fns: Mapping[str, CostFn]
                 ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, float]]:
    """``(costs, base, teacher)`` (see :class:`BlockTable`), checked to add up on the full
    child of each width."""
    layers = int(space.config["num_hidden_layers"])
    costs = {n: np.zeros((len(widths), layers, len(options))) for n in fns}
    base = {n: np.zeros(len(widths)) for n in fns}
    teacher = {n: fn(space.default()) for n, fn in fns.items()}
    skipped = {f"L{i}_{k}": v for i in range(layers)
               for k, v in (("keep", 0), ("heads", "1"), ("ffn", "1"))}
    for w, h in enumerate(widths):
        empty = {**skipped, "hidden_size": h}
        for name, fn in fns.items():
            base[name][w] = fn(empty)
            for i in range(layers):
                for c, option in enumerate(options):
                    if option != SKIP:
                        arch = {**empty, f"L{i}_keep": 1, f"L{i}_heads": option[0],
                                f"L{i}_ffn": option[1]}
                        costs[name][w, i, c] = fn(arch) - base[name][w]
            full = {**empty, **{f"L{i}_keep": 1 for i in range(layers)}}
            summed = base[name][w] + costs[name][w, :, options.index(("1", "1"))].sum()
            if not np.isclose(summed, fn(full), rtol=1e-6, atol=1e-9):
                raise BlockwiseError(f"blockwise: the {name} of width {h} is not the sum of "
                                     f"its layers' ({summed:g} against {fn(full):g}); a "
                                     "knapsack over layers needs an additive cost")
    return costs, base, teacher


def block_table(space: SearchSpace, supernet: GraphNet,
                batches: Iterable[Mapping[str, torch.Tensor]], *, task: str | None = None,
                seed: int = 0, seq_len: int = 128, latency_fn: CostFn | None = None,
                cache_dir: str | Path | None = None) -> BlockTable:
    """The :class:`BlockTable` of ``space`` (``bert-subnet``, ``layers="any"``) whose
    ``supernet`` holds the teacher (sorted by importance first, so that leading slices
    are its best weights), on the calibration ``batches`` (e.g. 256 sequences of the
    task). ``task`` (and ``seed``, the sample's) caches the teacher's block states;
    ``latency_fn`` (``arch -> ms``, the batch-1 latency model) adds ``latency_ms`` to the
    costs, counted with parameters at ``seq_len`` tokens. Logs how long it took."""
    _check_space(space)
    import torch

    device = next(supernet.parameters()).device
    batches = _batches_on(batches, device)
    if not batches:
        raise BlockwiseError("blockwise: the table needs a calibration sample; got no batch")
    widths = tuple(int(v) for v in space.choice_map["hidden_size"].values)
    options = layer_options(space)
    was_training = supernet.training
    supernet.eval()
    seconds: dict[str, float] = {}
    try:
        start = time.perf_counter()
        states, hit = cached_states(supernet, space, batches, task=task, seed=seed,
                                    cache_dir=cache_dir)
        seconds["teacher_states"] = time.perf_counter() - start
        start = time.perf_counter()
        error = _block_errors(supernet, space, batches, states, widths, options)
        seconds["block_errors"] = time.perf_counter() - start
    finally:
        supernet.train(was_training)
    start = time.perf_counter()
    costs, base, teacher = _block_costs(space, widths, options,
                                        _cost_fns(space, seq_len, latency_fn))
    seconds["costs"] = time.perf_counter() - start
    seconds["total"] = sum(seconds.values())
    samples = sum(int(b["input_ids"].shape[0]) for b in batches)
    log.info("blockwise table: %d widths x %d layers x %d options on %d sequences in %.1f s "
             "(teacher states %.1f s%s, block errors %.1f s, costs %.1f s; %d torch "
             "thread(s))", len(widths), error.shape[1], len(options), samples,
             seconds["total"], seconds["teacher_states"], ", cached" if hit else "",
             seconds["block_errors"], seconds["costs"], torch.get_num_threads())
    return BlockTable(space, widths, options, error, costs, base, teacher, seconds)


# ---------------------------------------------------------------------------
# the proxy evaluator
# ---------------------------------------------------------------------------


@EVALUATORS.register("blockwise")
class BlockwiseEvaluator(Evaluator):
    """Objective ``block_score`` (maximised): minus the summed block error of the
    candidate's layers, read from a :class:`BlockTable` of the same teacher (module
    docstring). Its costs are the table's (``params``; ``latency_ms_predicted`` when the
    table has latency). The space may be the table's or its ``layers="first"`` twin."""

    objectives = (Objective("block_score", "maximize"),)

    def __init__(self, space: SearchSpace, table: BlockTable) -> None:
        if not isinstance(table, BlockTable):
            raise EvaluatorError(f"blockwise: part 'table' must be a BlockTable "
                                 f"(evaluators.blockwise.block_table), got {type(table).__name__}")
        mine = {k: v for k, v in space.config.items() if k != "layers"}
        theirs = {k: v for k, v in table.space.config.items() if k != "layers"}
        if space.name != table.space.name or mine != theirs:
            raise EvaluatorError("blockwise: the table was built for another teacher's space; "
                                 "build it from the same teacher (block_table)")
        self.space = space
        self.table = table

    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        error = self.table.error_of(self.space.validate(arch))
        costs: dict[str, Any] = {"params": self.table.cost_of(arch, "params")}
        if "latency_ms" in self.table.costs:  # a prediction, so not filed as measured
            costs["latency_ms_predicted"] = self.table.cost_of(arch, "latency_ms")
        if trial is not None:
            trial.report(0, -error)
            if trial.should_prune():
                raise TrialPruned(f"pruned on block_score = {-error:g}")
        return EvalResult(values=(-error,), metrics={"block_error": error}, costs=costs)


__all__ = ["CACHE_KIND", "SKIP", "BlockTable", "BlockwiseError", "BlockwiseEvaluator",
           "activations_key", "block_table", "cached_states", "layer_options",
           "teacher_states"]
