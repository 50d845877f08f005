"""Importance sorting of a BERT teacher: heads, FFN neurons and hidden channels
(docs/reference.md#teacher-compression).

A child of the ``bert-subnet`` space keeps the *leading* heads, neurons and channels of
the teacher (``spaces/bert_subnet.py``). Sorting the teacher so that those leading slices
hold its most important weights is what makes an inherited child worth starting from:
DynaBERT's "rewiring" (Hou et al. 2020, §3.1) and Minitron's width pruning (Muralidharan
et al. 2024, §2). The permutation itself changes nothing the teacher computes: heads,
neurons and channels are reordered together with every weight that reads or writes them
(a LayerNorm is equivariant under a permutation of its channels), so the sorted teacher's
outputs equal the original's up to float rounding.

Two scores, computed on a calibration sample of the task (a list of batches, e.g. 256
sequences; model in eval mode):

* ``activation`` (Minitron, Muralidharan et al. 2024, §2.1): a head, the L2 norm of its
  attention output (before the output projection) summed over the tokens, averaged over
  the sequences; an FFN neuron, the mean magnitude of its activation after the first
  linear layer; a hidden channel, the mean magnitude of the LayerNorm outputs on that
  channel (the embeddings' and each layer's two), over the unpadded tokens.
* ``gradient`` (Michel et al. 2019, §4.1; DynaBERT, Hou et al. 2020, §3.1): a mask
  variable ξ = 1 multiplies each head's output, each neuron's activation and each hidden
  channel (the same ξ at every LayerNorm output); the score is ``|∂L/∂ξ|`` (that is,
  ``|Σ grad · activation|`` over the batch's tokens) summed over the batches, ``L`` the
  task's cross-entropy on the batch's ``labels`` (the model's own predictions when the
  batch has none).

:func:`sort_teacher` is the one call a recipe needs: scores (cached under the ``importance``
kind of the engine cache when the task is named), then the permuted copy of the teacher.
The teacher is a ``bert`` design (:func:`nas.hf.load_teacher_as_design`) or any network
with its parameter names (the ``bert-subnet`` supernet); weights are found through the
name map of :mod:`nas.hf`, so this module knows the HF names only.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from nas.network import GraphNet
from torch.nn import functional as F

from nas.errors import NasError

METHODS = ("activation", "gradient")
#: The cache kind (a folder of :func:`nas.cache.cache_root`).
CACHE_KIND = "importance"


class ImportanceError(NasError):
    """A teacher, sample or setting that importance sorting cannot use."""


@dataclass(frozen=True)
class Importance:
    """Scores, higher = more important: ``heads`` (layers × heads), ``neurons`` (layers ×
    FFN width), ``hidden`` (hidden width)."""

    heads: torch.Tensor
    neurons: torch.Tensor
    hidden: torch.Tensor
    method: str

    def orders(self) -> dict[str, torch.Tensor]:
        """The permutations that sort each score, most important first (ties keep the
        original order): ``heads`` and ``neurons`` one row per layer, ``hidden`` one row."""
        def order(t: torch.Tensor) -> torch.Tensor:
            return torch.sort(t, dim=-1, descending=True, stable=True).indices

        return {"heads": order(self.heads), "neurons": order(self.neurons),
                "hidden": order(self.hidden)}

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"heads": self.heads, "neurons": self.neurons, "hidden": self.hidden}


# ---------------------------------------------------------------------------
# the teacher's layout, through nas.hf's name map
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    ours: dict[str, str]  # HF name -> our parameter name
    layers: int
    heads: int
    head_size: int
    ffn: int
    hidden: int
    #: ELECTRA's embeddings (E ≠ H): tables and norm at E, ``embeddings_project`` E → H
    projected: bool = False

    def module(self, model: nn.Module, hf_param: str) -> nn.Module:
        """The module holding the HF-named parameter ``hf_param``."""
        return model.get_submodule(self.ours[hf_param].rsplit(".", 1)[0])


def _layout(model: nn.Module) -> _Layout:
    from nas.hf import our_to_hf_names

    graph = getattr(model, "graph", None)
    if graph is None or "emb" not in graph or "L0_attn" not in graph:
        raise ImportanceError("importance sorting needs a teacher in the `bert` design "
                              "(nas.hf.load_teacher_as_design) or the bert-subnet supernet")
    names = our_to_hf_names(cast("GraphNet", model), "bert")  # it has a graph (just checked)
    unmapped = [n for n in model.state_dict() if n not in names]
    if unmapped:
        raise ImportanceError(f"the teacher has tensors with no BERT name ({unmapped[:3]}); "
                              "sort a plain `bert` design (no fit layer)")
    ours = {hf: o for o, hf in names.items()}
    state = model.state_dict()
    layers = sum(1 for hf in ours if re.fullmatch(r"encoder\.layer\.\d+\.attention\.self\."
                                                  r"query\.weight", hf))
    head_size = int(graph.nodes["L0_attn"]["params"]["head_size"])
    query = state[ours["encoder.layer.0.attention.self.query.weight"]]
    ffn = state[ours["encoder.layer.0.intermediate.dense.weight"]].shape[0]
    for i in range(layers):
        p = f"encoder.layer.{i}."
        if (state[ours[p + "attention.self.query.weight"]].shape != query.shape
                or state[ours[p + "intermediate.dense.weight"]].shape[0] != ffn):
            raise ImportanceError(f"layer {i} of the teacher is not the shape of layer 0; "
                                  "sort the full teacher, not a child")
    return _Layout(ours, layers, query.shape[0] // head_size, head_size, ffn,
                   query.shape[1], _PROJECT in ours)


#: ELECTRA's projection of its E-wide embeddings to the hidden width (BERT's naming of it).
_PROJECT = "embeddings.embeddings_project.weight"


def _norm_params(layout: _Layout) -> list[str]:
    """The HF names of the LayerNorm weights whose outputs are the hidden states (of the
    embeddings' projection where it has one: its LayerNorm is then at E)."""
    out = [_PROJECT if layout.projected else "embeddings.LayerNorm.weight"]
    for i in range(layout.layers):
        out += [f"encoder.layer.{i}.attention.output.LayerNorm.weight",
                f"encoder.layer.{i}.output.LayerNorm.weight"]
    return out


# ---------------------------------------------------------------------------
# scores
# ---------------------------------------------------------------------------


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _token_mask(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    return (torch.ones_like(ids) if mask is None else mask).to(torch.float32)  # (B, L)


def importance_scores(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]],
                      method: str) -> Importance:
    """The scores of ``method`` (see the module docstring) on ``batches``."""
    if method not in METHODS:
        raise ImportanceError(f"importance method {method!r} is unknown; use one of "
                              f"{', '.join(METHODS)}")
    layout = _layout(model)
    batches = list(batches)
    if not batches:
        raise ImportanceError("importance sorting needs a calibration sample; got no batch")
    was_training = model.training
    model.eval()
    try:
        if method == "activation":
            return _activation_scores(model, layout, batches)
        return _gradient_scores(model, layout, batches)
    finally:
        model.train(was_training)


def _attention_cores(model: nn.Module, layout: _Layout) -> list[nn.Module]:
    """Each layer's multi-head attention before its output projection (``.self``)."""
    return [model.get_submodule(
        layout.ours[f"encoder.layer.{i}.attention.self.query.weight"].rsplit(".", 2)[0])
        for i in range(layout.layers)]


def _intermediates(model: nn.Module, layout: _Layout) -> list[nn.Module]:
    return [layout.module(model, f"encoder.layer.{i}.intermediate.dense.weight")
            for i in range(layout.layers)]


def _norms(model: nn.Module, layout: _Layout) -> list[nn.Module]:
    return [layout.module(model, name) for name in _norm_params(layout)]


@torch.no_grad()
def _activation_scores(model: nn.Module, layout: _Layout, batches: list) -> Importance:
    dev = _device(model)
    heads = torch.zeros(layout.layers, layout.heads, dtype=torch.float64, device=dev)
    neurons = torch.zeros(layout.layers, layout.ffn, dtype=torch.float64, device=dev)
    hidden = torch.zeros(layout.hidden, dtype=torch.float64, device=dev)
    mask: dict[str, torch.Tensor] = {}

    def on_heads(i: int):
        def hook(module, args, out):  # out: (B, L, A·d), before the output projection
            b, length, _ = out.shape
            norms = out.view(b, length, layout.heads, layout.head_size).norm(dim=-1)
            heads[i] += (norms * mask["m"][..., None]).sum(dim=(0, 1)).double()
        return hook

    def on_neurons(i: int):
        def hook(module, args, out):  # out: (B, L, FFN), after the first linear layer
            neurons[i] += (out.abs() * mask["m"][..., None]).sum(dim=(0, 1)).double()
        return hook

    def on_hidden(module, args, out):  # out: (B, L, H), a LayerNorm's output
        hidden.add_((out.abs() * mask["m"][..., None]).sum(dim=(0, 1)).double())

    handles = [m.register_forward_hook(on_heads(i))
               for i, m in enumerate(_attention_cores(model, layout))]
    handles += [m.register_forward_hook(on_neurons(i))
                for i, m in enumerate(_intermediates(model, layout))]
    handles += [m.register_forward_hook(on_hidden) for m in _norms(model, layout)]
    sequences = tokens = 0.0
    try:
        for batch in batches:
            mask["m"] = _token_mask(batch).to(dev)
            model(batch)
            sequences += mask["m"].shape[0]
            tokens += float(mask["m"].sum())
    finally:
        for h in handles:
            h.remove()
    return Importance((heads / sequences).float().cpu(), (neurons / tokens).float().cpu(),
                      (hidden / tokens).float().cpu(), "activation")


def _task_loss(logits: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    labels = batch.get("labels")
    if logits.shape[-1] == 1:  # regression
        if labels is None:
            raise ImportanceError("gradient importance of a regression task needs `labels` "
                                  "in the calibration batches")
        return F.mse_loss(logits.squeeze(-1), labels.to(logits.device, logits.dtype))
    if labels is None:  # the teacher's own answers stand in for the labels
        labels = logits.detach().argmax(dim=-1)
    # the calibration batches stay on the CPU; the model runs on the run's device
    return F.cross_entropy(logits, labels.to(logits.device).long(), reduction="sum")


def _gradient_scores(model: nn.Module, layout: _Layout, batches: list) -> Importance:
    dev = _device(model)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, device=dev, requires_grad=True)

    xi_heads = [ones(layout.heads) for _ in range(layout.layers)]
    xi_neurons = [ones(layout.ffn) for _ in range(layout.layers)]
    xi_hidden = ones(layout.hidden)
    scores = [torch.zeros(layout.layers, layout.heads, dtype=torch.float64, device=dev),
              torch.zeros(layout.layers, layout.ffn, dtype=torch.float64, device=dev),
              torch.zeros(layout.hidden, dtype=torch.float64, device=dev)]

    def masked(xi: torch.Tensor, repeat: int = 1):
        def hook(module, args, out):
            return out * (xi.repeat_interleave(repeat) if repeat > 1 else xi)
        return hook

    handles = [m.register_forward_hook(masked(xi_heads[i], layout.head_size))
               for i, m in enumerate(_attention_cores(model, layout))]
    handles += [m.register_forward_hook(masked(xi_neurons[i]))
                for i, m in enumerate(_intermediates(model, layout))]
    handles += [m.register_forward_hook(masked(xi_hidden)) for m in _norms(model, layout)]
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    try:
        for p in model.parameters():
            p.requires_grad_(False)  # only the masks need gradients
        with torch.enable_grad():
            for batch in batches:
                xis = [*xi_heads, *xi_neurons, xi_hidden]
                loss = _task_loss(model(batch).logits, batch)
                grads = torch.autograd.grad(loss, xis)
                n = layout.layers
                scores[0] += torch.stack(grads[:n]).abs().double()
                scores[1] += torch.stack(grads[n:2 * n]).abs().double()
                scores[2] += grads[-1].abs().double()
    finally:
        for h in handles:
            h.remove()
        for name, p in model.named_parameters():
            p.requires_grad_(flags[name])
    heads, neurons, hidden = (s.float().cpu() for s in scores)
    return Importance(heads, neurons, hidden, "gradient")


# ---------------------------------------------------------------------------
# the permutation
# ---------------------------------------------------------------------------

#: Which axes of each HF-named tensor index hidden channels (``H``), heads (``A``: blocks
#: of head_size rows or columns) or FFN neurons (``F``), by axis.
_AXES: list[tuple[str, tuple[str | None, ...]]] = [
    (r"embeddings\.(word|position|token_type)_embeddings\.weight", (None, "H")),
    (r"embeddings\.LayerNorm\.(weight|bias)", ("H",)),
    (r"embeddings\.embeddings_project\.weight", ("H", None)),
    (r"embeddings\.embeddings_project\.bias", ("H",)),
    (r"encoder\.layer\.\d+\.attention\.self\.(query|key|value)\.weight", ("A", "H")),
    (r"encoder\.layer\.\d+\.attention\.self\.(query|key|value)\.bias", ("A",)),
    (r"encoder\.layer\.\d+\.attention\.output\.dense\.weight", ("H", "A")),
    (r"encoder\.layer\.\d+\.attention\.output\.dense\.bias", ("H",)),
    (r"encoder\.layer\.\d+\.attention\.output\.LayerNorm\.(weight|bias)", ("H",)),
    (r"encoder\.layer\.\d+\.intermediate\.dense\.weight", ("F", "H")),
    (r"encoder\.layer\.\d+\.intermediate\.dense\.bias", ("F",)),
    (r"encoder\.layer\.\d+\.output\.dense\.weight", ("H", "F")),
    (r"encoder\.layer\.\d+\.output\.dense\.bias", ("H",)),
    (r"encoder\.layer\.\d+\.output\.LayerNorm\.(weight|bias)", ("H",)),
    # the pooler's output is sliced with the hidden width too: its rows follow the same
    # order, which the classifier's columns undo
    (r"pooler\.dense\.weight", ("H", "H")),
    (r"pooler\.dense\.bias", ("H",)),
    (r"classifier\.weight", (None, "H")),
    (r"classifier\.bias", (None,)),
]


def _check_orders(orders: Mapping[str, torch.Tensor], layout: _Layout) -> None:
    """Refuse orders that are not one permutation per layer of the teacher's widths."""
    shapes = {"heads": (layout.layers, layout.heads), "neurons": (layout.layers, layout.ffn),
              "hidden": (layout.hidden,)}
    for kind, shape in shapes.items():
        t = orders.get(kind)
        if t is None or tuple(t.shape) != shape or not torch.equal(
                t.sort(dim=-1).values.cpu(), torch.arange(shape[-1]).expand(shape)):
            raise ImportanceError(f"orders[{kind!r}] must hold a permutation of "
                                  f"0..{shape[-1] - 1} per row, shape {shape}")


def permute_teacher(model: nn.Module, orders: Mapping[str, torch.Tensor]) -> nn.Module:
    """A copy of ``model`` with its heads, neurons and hidden channels in ``orders``
    (:meth:`Importance.orders`); it computes what ``model`` computes."""
    layout = _layout(model)
    _check_orders(orders, layout)
    head_rows = [(o[:, None] * layout.head_size + torch.arange(layout.head_size)).flatten()
                 for o in orders["heads"]]
    state = model.state_dict()
    out = {}
    for hf, ours in layout.ours.items():
        axes = next((a for pattern, a in _AXES if re.fullmatch(pattern, hf)), None)
        if axes is None:
            raise ImportanceError(f"{hf}: no rule says how it is permuted")
        if layout.projected and re.match(r"embeddings\.(?!embeddings_project)", hf):
            axes = (None,) * len(axes)  # at E, before the projection to the hidden width
        layer = re.match(r"encoder\.layer\.(\d+)\.", hf)
        t = state[ours]
        for dim, kind in enumerate(axes):
            if kind == "H":
                index = orders["hidden"]
            elif kind == "A":
                index = head_rows[int(layer[1])]  # type: ignore[index]  # A and F live in encoder layers
            elif kind == "F":
                index = orders["neurons"][int(layer[1])]  # type: ignore[index]  # as A above
            else:
                continue
            t = t.index_select(dim, index.to(t.device))
        out[ours] = t
    sorted_model = copy.deepcopy(model)
    sorted_model.load_state_dict(out)
    return sorted_model


# ---------------------------------------------------------------------------
# the one call, cached
# ---------------------------------------------------------------------------


def importance_key(teacher: str, task: str, method: str, samples: int, seed: int) -> str:
    """The cache key of a teacher's scores: its settings (``teacher``: a fingerprint of its
    weights, :func:`nas.cache.weights_fingerprint`)."""
    from nas.cache import settings_key

    return settings_key(kind=CACHE_KIND, teacher=teacher, task=task, method=method,
                        samples=samples, seed=seed)


def sort_teacher(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]],
                 method: str = "activation", *, task: str | None = None, seed: int = 0,
                 cache_dir: str | Path | None = None) -> tuple[nn.Module, Importance]:
    """``(sorted copy of the teacher, its scores)``: every leading slice of the sorted
    teacher holds its most important heads, neurons and channels (module docstring).

    With ``task`` (the task's name; ``seed``: the seed the calibration sample was drawn
    with) the scores are cached in the engine cache under kind ``importance``, keyed by
    the teacher's weights, the task, the method, the sample size and the seed;
    without, they are computed each time.
    """
    batches = list(batches)
    if method not in METHODS:
        raise ImportanceError(f"importance method {method!r} is unknown; use one of "
                              f"{', '.join(METHODS)}")
    if task is None:
        scores = importance_scores(model, batches, method)
    else:
        scores = _cached_scores(model, batches, method, task, seed, cache_dir)
    return permute_teacher(model, scores.orders()), scores


def _cached_scores(model: nn.Module, batches: list, method: str, task: str, seed: int,
                   cache_dir: str | Path | None) -> Importance:
    from nas.cache import cache_root, cached_entry, load_tensors, weights_fingerprint
    from nas.checkpoint import save_safetensors

    samples = sum(int(b["input_ids"].shape[0]) for b in batches)
    teacher = weights_fingerprint(model)
    key = importance_key(teacher, task, method, samples, seed)
    folder = cache_root(cache_dir) / CACHE_KIND / key
    path = folder / "scores.safetensors"

    def compute() -> dict[str, Any]:
        start = time.perf_counter()
        scores = importance_scores(model, batches, method)
        save_safetensors({k: v.contiguous() for k, v in scores.tensors().items()}, path)
        return dict(teacher=teacher, task=task, method=method, samples=samples, seed=seed,
                    seconds=round(time.perf_counter() - start, 3))

    cached_entry(folder, "importance scores", compute)  # held for readers from here on
    tensors = load_tensors(path)
    return Importance(tensors["heads"], tensors["neurons"], tensors["hidden"], method)


__all__ = ["CACHE_KIND", "METHODS", "Importance", "ImportanceError", "importance_key",
           "importance_scores", "permute_teacher", "sort_teacher"]
