"""A child's latency on the runtime it ships in: its graph exported to ONNX (fp32, or
dynamic int8 as ``nas export --quantize int8`` makes it) and timed on ONNX Runtime at one
intra-op thread on the CPU.

A latency's runtime is one of :data:`nas.timing.LATENCY_RUNTIMES` (the names a run's
``latency:`` section takes); each maps to the name its timings are recorded under
(``torch-fp32``, ``onnx-fp32``, ``onnx-int8``). The int8 graph is made
by the export's own steps (:func:`nas.quantize.pre_process`, :func:`nas.quantize.quantize`
with the ``reduce_range`` rule), so a searched latency is the shipped graph's: an export
of a run's graph skips ONNX Runtime's BERT optimiser (it fuses only stock ``transformers``
BERT graphs), as this does.

With one intra-op thread ONNX Runtime runs the graph in the calling thread, so the CPU
clock of :mod:`nas.latency` (the thread's time) covers the whole call.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nas.cost import Latency
from nas.network import GraphNet
from nas.timing import LATENCY_RUNTIMES, ONNX_RUNTIMES, time_call


def child_graph(child: GraphNet, folder: Path, runtime: str) -> Path:
    """``child`` as the ONNX graph ``runtime`` runs, written under ``folder``: traced to
    ``model.onnx`` (fp32); for ``onnx-int8``, pre-processed and quantised as an export is
    (per-channel int8 weights, ``reduce_range`` where the CPU needs it; the nodes of a
    layer left without heads kept as they are, nothing to quantise)."""
    from nas.export import _vocab_size, export_onnx, model_inputs
    from nas.quantize import empty_weight_nodes, needs_reduce_range, pre_process, quantize

    if runtime not in ONNX_RUNTIMES:
        raise ValueError(f"{runtime!r} is not an ONNX runtime ({', '.join(ONNX_RUNTIMES)})")
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = folder / "model.onnx"
    export_onnx(child.eval(), model_inputs(child), fp32, _vocab_size(child) or 2)
    if runtime == "onnx":
        return fp32
    pre, int8 = folder / "model.pre.onnx", folder / "model.int8.onnx"
    pre_process(fp32, pre, symbolic=False)  # both quiet the quantiser's root-logger lines
    quantize(pre, int8, needs_reduce_range(), empty_weight_nodes(pre))
    return int8


def session(path: Path) -> Any:
    """An ONNX Runtime CPU session of ``path`` at one intra-op and inter-op thread."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def graph_runner(path: Path, batch_size: int, seq_len: int, vocab_size: int,
                 seed: int = 0) -> Callable[[], object]:
    """One call of the graph at ``path`` on seeded random ids (full masks, token type 0)
    of ``batch_size`` x ``seq_len``: what the timings run."""
    sess = session(path)
    rng = np.random.default_rng(seed)
    feed: dict[str, np.ndarray] = {}
    for i in sess.get_inputs():
        if i.name.startswith("input_ids"):
            feed[i.name] = rng.integers(0, max(1, vocab_size), (batch_size, seq_len),
                                        dtype=np.int64)
        elif i.name.startswith("attention_mask"):
            feed[i.name] = np.ones((batch_size, seq_len), dtype=np.int64)
        else:
            feed[i.name] = np.zeros((batch_size, seq_len), dtype=np.int64)
    return lambda: sess.run(None, feed)


def vocab_of(child: GraphNet) -> int:
    """The child's word-table size (the random ids' range)."""
    from nas.export import _vocab_size

    return _vocab_size(child) or 2


def measure_onnx_latency(child: GraphNet, batch: Mapping[str, torch.Tensor], runtime: str,
                         warmup: int = 3, repeats: int = 10) -> Latency:
    """A trained child's latency on ``runtime``'s ONNX graph at the shape of ``batch``
    (random ids of its batch size and length, one thread), exported to a temporary folder:
    the ``latency: {source: measured, runtime: onnx-int8}`` of a search's candidates."""
    ids = next(iter(batch.values()))
    batch_size, seq_len = int(ids.shape[0]), int(ids.shape[1])
    child = _on_cpu(child)
    with tempfile.TemporaryDirectory(prefix="nas-onnx-latency-") as tmp:
        path = child_graph(child, Path(tmp), runtime)
        run = graph_runner(path, batch_size, seq_len, vocab_of(child))
        timing = time_call(run, warmup, repeats)
    return Latency(batch_size, seq_len, timing.median_ms, timing.p90_ms, repeats, 1,
                   runtime=LATENCY_RUNTIMES[runtime])


def _on_cpu(child: GraphNet) -> GraphNet:
    """``child``, or a CPU copy of it when it lives on a GPU (traced on the CPU)."""
    from nas.device import module_device

    if module_device(child).type == "cpu":
        return child
    import copy

    return copy.deepcopy(child).cpu()


__all__ = ["child_graph", "graph_runner", "measure_onnx_latency", "session", "vocab_of"]
