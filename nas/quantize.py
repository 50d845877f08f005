"""Dynamic int8 quantisation of an export's ``model.onnx`` (``nas export --quantize int8``).

A CPU runs a compact Transformer fastest as an int8 graph in ONNX Runtime: on the
fine-tuned six-layer teacher (batch 1, one thread, 24 tokens) fp32 ONNX Runtime took
7.94 ms and dynamic per-channel int8 3.67 ms at 98.1% agreement. The steps, as ONNX
Runtime's quantisation guide orders them:

1. **optimise** a BERT-shaped graph (a stock ``transformers`` BERT folder) with
   ``onnxruntime.transformers.optimizer`` (fused attention, skip-LayerNorm, GELU); other
   graphs skip it (recorded);
2. **pre-process** with ``quant_pre_process`` (shape inference, symbolic after the
   optimiser's fusions, and graph clean-up: it reads weights only from the ONNX file
   itself, which is why exports keep them there);
3. **quantise** with ``quantize_dynamic``: int8 weights per output channel, activations
   quantised at run time; ``reduce_range`` (7-bit weights) where the CPU needs it
   (:func:`needs_reduce_range`).

On dev (when the export comes from a run) the int8 graph is compared with the fp32 one:
agreement and the metric's change are recorded, never used to choose anything but the
layers left in fp32. When the int8 graph loses more than ``max_drop`` points, the
quantisable nodes of one layer at a time are kept in fp32 (``nodes_to_exclude``), greedily,
the layer whose exclusion recovers most first, until the loss is within ``max_drop`` or no
layer helps. Both graphs' latencies (batch 1, one thread, the trained length) are timed
with :func:`nas.timing.time_call`, interleaved.
"""

from __future__ import annotations

import functools
import logging
import platform
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nas.errors import ExportError

log = logging.getLogger(__name__)

#: What ``--quantize`` accepts.
QUANTIZATIONS = ("int8",)
#: The default largest loss on dev (metric points) an int8 graph may show before layers
#: are kept in fp32.
MAX_INT8_DROP = 0.3
#: CPU flags whose int8 dot products do not saturate on u8 x s8 products (VNNI, AMX).
_WIDE_INT8_FLAGS = {"avx512_vnni", "avx_vnni", "amx_int8"}
#: Node types quantised (the per-layer exclusion's units): the matrix products and the
#: embedding tables. Not ``Conv``: ONNX Runtime's ``ConvInteger`` ran AdaBERT's cells
#: 4x slower than fp32 (8.3 vs 2.0 ms, batch 1, 128 tokens, one thread), so convolutions
#: stay fp32.
QUANTIZED_OPS = ("MatMul", "Gemm", "Attention", "Gather")


@dataclass(frozen=True)
class DevSet:
    """The examples an int8 graph is compared on: dev texts and the model's class index
    of each label; ``metric``: the task's (:func:`nas.teacher.metric_score`)."""

    texts_a: Sequence[str]
    texts_b: Sequence[str] | None
    labels: Sequence[int]
    metric: str

    @classmethod
    def of(cls, data: Any, labels: Sequence[int] | None = None,
           metric: str | None = None) -> DevSet:
        """The examples of a task split (``data``: its texts, labels and metric);
        ``labels``: the class index of each row in a model's order, when that is not the
        split's own; ``metric``: another than the split's."""
        return cls(list(data.texts_a), list(data.texts_b) if data.texts_b else None,
                   list(data.labels if labels is None else labels),
                   data.metric if metric is None else metric)


def needs_reduce_range(machine: str | None = None, flags: set[str] | None = None) -> bool:
    """Whether weights should be 7-bit (``reduce_range``): on x86-64 without VNNI or AMX
    the u8 x s8 multiply-add (``VPMADDUBSW``) saturates its int16 sums with full 8-bit
    weights, which ONNX Runtime's quantisation guide advises against; VNNI, AMX and ARM
    accumulate in int32 and keep the full range. An x86 CPU whose flags cannot be read is
    treated as lacking VNNI (the safe side)."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64", "x86", "i386", "i686"):
        return False
    if flags is None:
        flags = _cpu_flags()
    return not (flags & _WIDE_INT8_FLAGS)


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def check_quantize(quantize: str | None, fmt: str) -> None:
    """One line for a quantisation the engine cannot write."""
    if quantize is None:
        return
    if quantize not in QUANTIZATIONS:
        raise ExportError(f"--quantize must be {' or '.join(QUANTIZATIONS)}, got {quantize!r}")
    if fmt != "onnx":
        raise ExportError(f"--quantize {quantize} needs --format onnx (it quantises "
                          f"model.onnx), got --format {fmt}")


# ---------------------------------------------------------------------------
# the three steps
# ---------------------------------------------------------------------------


def bert_shape(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(heads, hidden)`` of a stock ``transformers`` BERT config (what ONNX Runtime's
    BERT optimiser fuses); ``None`` for any other graph."""
    if config.get("model_type") != "bert":
        return None
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    return (int(heads), int(hidden)) if heads and hidden else None


def optimize(src: Path, dst: Path, shape: tuple[int, int] | None) -> str | None:
    """ONNX Runtime's transformer optimiser on a BERT-shaped graph; ``None`` (and ``dst``
    a copy of ``src``) where it does not apply or fails (logged): the fusions are a
    speed-up, never a condition of the export."""
    import shutil

    if shape is not None:
        try:
            from onnxruntime.transformers import optimizer

            heads, hidden = shape
            model = optimizer.optimize_model(str(src), model_type="bert", num_heads=heads,
                                             hidden_size=hidden, opt_level=1)
            model.save_model_to_file(str(dst))
            return "bert"
        except Exception as err:  # the optimiser raises many kinds on a graph it misreads
            log.info("ONNX Runtime's BERT optimiser skipped (%s)", err)
    shutil.copyfile(src, dst)
    return None


def pre_process(src: Path, dst: Path, symbolic: bool) -> str:
    """``quant_pre_process``: shape inference and ONNX Runtime's basic clean-up. Symbolic
    shape inference (``symbolic``) for a graph the optimiser fused (its contrib ops have
    shapes only it knows); ONNX's own for a graph of standard ops: the symbolic one gives
    up on some (AdaBERT's cells), and then leaves a temporary model in the working
    directory. Returns which one ran."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        with quiet_quantizer():
            quant_pre_process(str(src), str(dst), skip_symbolic_shape=not symbolic)
    except Exception as err:  # onnxruntime's own untyped errors
        raise ExportError(f"{src.name}: quant_pre_process cannot read it "
                          f"({' '.join(str(err).split())[:200]})") from None
    return "symbolic" if symbolic else "onnx"


def quantize(src: Path, dst: Path, reduce_range: bool, exclude: Sequence[str] = ()) -> None:
    """``quantize_dynamic``: int8 weights per output channel, ``exclude`` kept in fp32."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quiet_quantizer():
        quantize_dynamic(str(src), str(dst), per_channel=True, reduce_range=reduce_range,
                         weight_type=QuantType.QInt8, nodes_to_exclude=list(exclude),
                         op_types_to_quantize=list(QUANTIZED_OPS))


@contextmanager
def quiet_quantizer() -> Iterator[None]:
    """ONNX Runtime's quantiser logs a line per tensor on the root logger at INFO (a
    teacher's export wrote 2,500 of them into a run's log); they are dropped for the
    block (the engine's own loggers are named, and a filter on the root logger leaves
    them and every warning)."""
    def keep(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def layer_groups(path: Path) -> dict[str, list[str]]:
    """The quantisable nodes of a graph, grouped by layer (``layer.N`` of a transformers
    graph, the graph node of an engine export, else the node alone), in graph order."""
    import onnx

    groups: dict[str, list[str]] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.op_type not in QUANTIZED_OPS or not node.name:
            continue
        groups.setdefault(_layer_key(node.name), []).append(node.name)
    return groups


def empty_weight_nodes(path: Path) -> list[str]:
    """Quantisable nodes whose weight has a zero-size axis (a pruned child's layer with
    no heads left): ``quantize_dynamic`` fails on them, and there is nothing to quantise."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    empty = {t.name for t in graph.initializer if 0 in t.dims}
    return [n.name for n in graph.node
            if n.op_type in QUANTIZED_OPS and n.name and empty & set(n.input)]


def _layer_key(name: str) -> str:
    found = re.search(r"layer[._](\d+)", name) or re.search(r"nodes\.([^/]+?)(?:\.|/|$)", name)
    return found.group(0).rstrip("./") if found else name


# ---------------------------------------------------------------------------
# a run's dev
# ---------------------------------------------------------------------------


def run_dev(run_dir: Path, export_dir: Path) -> DevSet | None:
    """The dev examples the run scored (``data.max_dev_examples`` cut as the run cut it),
    with labels as ``export_dir``'s class indices; ``None`` for a tagging model (its dev
    is scored by spans, not classes)."""
    from nas.data import load_task, resolve_task
    from nas.data.files import recorded_task
    from nas.evaluate import label_indices
    from nas.rundir import RunDir
    from nas.runtime import label_names, read_config
    from nas.seeding import sample_rows

    config = read_config(export_dir)
    if config.get("head") is not None:
        return None
    run = RunDir(run_dir)
    task = resolve_task(recorded_task(run.config.get("task"), run_dir))
    data = load_task(task, "dev")
    settings = run.config.get("data") or {}
    n = settings.get("max_dev_examples")
    if n and settings.get("dev_subset") == "seeded":
        rows = sample_rows(len(data), n, int(run.config.get("seed", 0)), "dev-subset")
        data = data if rows is None else data.subset(rows)
    elif n:
        data = data.head(n)
    return DevSet.of(data, label_indices(label_names(config), data, {}, export_dir))


def run_max_drop(run_dir: Path) -> float:
    """The run's ``final.export.max_int8_drop``, else :data:`MAX_INT8_DROP`."""
    from nas.rundir import RunDir

    final = RunDir(run_dir).config.get("final") or {}
    value = (final.get("export") or {}).get("max_int8_drop") if isinstance(final, dict) else None
    return float(value) if isinstance(value, int | float) else MAX_INT8_DROP


# ---------------------------------------------------------------------------
# the export folder
# ---------------------------------------------------------------------------


def quantize_export(directory: Path, config: Mapping[str, Any], dev: DevSet | None,
                    max_drop: float = MAX_INT8_DROP, seq_len: int = 128) -> dict[str, Any]:
    """Replace ``directory/model.onnx`` (fp32) by its int8 graph; returns the record that
    ``config.json`` keeps under ``quantization``. ``config``: the folder's ``config.json``
    (what says whether the graph is BERT-shaped); ``dev``: the examples to compare on
    (``None``: the comparison is "not measured"); ``seq_len``: the latency's tokens."""
    from nas.runtime import ONNX_FILE

    fp32 = directory / ONNX_FILE
    reduce_range = needs_reduce_range()
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        work = Path(tmp)
        optimized = optimize(fp32, work / "optimized.onnx", bert_shape(config))
        shapes = pre_process(work / "optimized.onnx", work / "pre.onnx",
                             symbolic=optimized is not None)

        empty = empty_weight_nodes(work / "pre.onnx")

        def build(exclude: Sequence[str]) -> Path:
            out = work / f"int8-{len(list(work.iterdir()))}.onnx"
            quantize(work / "pre.onnx", out, reduce_range, [*empty, *exclude])
            return out

        int8 = build(())
        record: dict[str, Any] = {
            "weights": "int8", "activations": "int8, dynamic (per batch)",
            "per_channel": True, "reduce_range": reduce_range, "optimizer": optimized,
            "shape_inference": shapes,
            "ops": list(QUANTIZED_OPS), "tool": f"onnxruntime {_ort_version()}",
            "excluded_nodes": [],
            "fp32_onnx_bytes": fp32.stat().st_size}
        if dev is None:
            record["dev"] = "not measured"
        else:
            int8, record["dev"], record["excluded_nodes"] = _compare(
                directory, fp32, int8, work / "pre.onnx", dev, max_drop, build)
        record["latency"] = _latencies(fp32, int8, config, seq_len)
        int8.replace(fp32)
    record["int8_onnx_bytes"] = fp32.stat().st_size
    return record


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def _session(path: Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _feeds(directory: Path, dev: DevSet, session: Any) -> list[tuple[list[int], dict]]:
    """Dev encoded as the export's tokenizer does, in batches of one token length (no
    padding: AdaBERT's convolutions see it), each with its rows."""
    from nas.runtime import ExportedModel, length_batches, read_config

    model = ExportedModel(directory, read_config(directory), "onnx", session)
    names = [i.name for i in session.get_inputs()]
    out = []
    for rows in length_batches(model.token_lengths(dev.texts_a, dev.texts_b), 64):
        a = [dev.texts_a[i] for i in rows]
        b = [dev.texts_b[i] for i in rows] if dev.texts_b is not None else None
        enc = model.encode(a, b)
        out.append((rows, {n: enc[n].numpy().astype("int64") for n in names if n in enc}))
    return out


def _predictions(session: Any, feeds: list[tuple[list[int], dict]], n: int) -> list[int]:
    preds = [0] * n
    for rows, feed in feeds:
        logits = session.run(None, feed)[0]
        for i, p in zip(rows, logits.argmax(-1).tolist(), strict=True):
            preds[i] = int(p)
    return preds


def _score(preds: Sequence[int], dev: DevSet) -> float:
    from nas.teacher import classification_metrics, metric_score

    return 100.0 * metric_score(classification_metrics(list(preds), list(dev.labels),
                                                       dev.metric), dev.metric)


def _compare(directory: Path, fp32: Path, int8: Path, pre: Path, dev: DevSet,
             max_drop: float, build: Callable[[Sequence[str]], Path]
             ) -> tuple[Path, dict[str, Any], list[str]]:
    """The int8 graph against fp32 on dev; layers kept in fp32 (greedy, one at a time)
    while it loses more than ``max_drop`` points. Returns the graph, the dev record and
    the excluded nodes."""
    reference = _session(fp32)
    feeds = _feeds(directory, dev, reference)
    n = len(dev.labels)
    fp32_preds = _predictions(reference, feeds, n)
    fp32_score = _score(fp32_preds, dev)

    def drop_of(path: Path) -> tuple[float, list[int]]:
        preds = _predictions(_session(path), feeds, n)
        return fp32_score - _score(preds, dev), preds

    drop, preds = drop_of(int8)
    excluded: list[str] = []
    tried: list[dict[str, Any]] = []
    groups = layer_groups(pre)
    while drop > max_drop and groups:
        trials = []
        for key, nodes in groups.items():
            path = build([*excluded, *nodes])
            trials.append((*drop_of(path), key, path))
        best = min(trials, key=lambda t: t[0])  # the first layer among equals
        if best[0] >= drop:
            break  # no layer in fp32 recovers anything
        drop, preds, key, int8 = best
        excluded += groups.pop(key)
        tried.append({"layer": key, "drop_points": round(drop, 4)})
    agreement = sum(a == b for a, b in zip(fp32_preds, preds, strict=True)) / max(n, 1)
    record: dict[str, Any] = {
        "examples": n, "metric": dev.metric, "fp32": round(fp32_score, 4),
        "int8": round(fp32_score - drop, 4),
        "change_points": round(-drop, 4) + 0.0,  # + 0.0: no "-0.0"
        "agreement": round(agreement, 4), "max_drop_points": max_drop,
        "fp32_layers": tried}
    if drop > max_drop:
        record["warning"] = (f"the int8 graph loses {drop:.2f} points on dev, more than "
                             f"max_int8_drop {max_drop}, with {len(tried)} layer(s) kept in "
                             "fp32; no further layer helps")
        log.warning("%s: %s", directory, record["warning"])
    return int8, record, excluded


def _latencies(fp32: Path, int8: Path, config: Mapping[str, Any], seq_len: int,
               rounds: int = 5, repeats: int = 4) -> dict[str, Any]:
    """Batch-1, one-thread latency of both graphs on random ids at ``seq_len`` tokens,
    interleaved (``rounds`` alternations of ``repeats`` calls each) so that a load change
    on a shared machine hits both alike: the median and IQR of all calls per graph."""
    import statistics

    import numpy as np

    from nas.timing import time_call

    sessions = {"fp32": _session(fp32), "int8": _session(int8)}
    vocab = min(int(config.get("vocab_size") or 1000), 1000)
    rng = np.random.default_rng(0)
    feed = {}
    for i in sessions["fp32"].get_inputs():
        if i.name.startswith("input_ids"):
            feed[i.name] = rng.integers(0, vocab, (1, seq_len), dtype=np.int64)
        elif i.name.startswith("attention_mask"):
            feed[i.name] = np.ones((1, seq_len), dtype=np.int64)
        else:
            feed[i.name] = np.zeros((1, seq_len), dtype=np.int64)
    medians: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            timing = time_call(functools.partial(session.run, None, feed), warmup=1,
                               repeats=repeats)
            medians[name].append(timing.median_ms)
    out: dict[str, Any] = {"batch_size": 1, "seq_len": seq_len, "threads": 1}
    for name, values in medians.items():
        q = statistics.quantiles(values, n=4, method="inclusive")
        out[name] = {"median_ms": round(statistics.median(values), 4),
                     "iqr_ms": round(q[2] - q[0], 4)}
    out["speedup"] = round(out["fp32"]["median_ms"] / out["int8"]["median_ms"], 3)
    return out


__all__ = ["MAX_INT8_DROP", "QUANTIZATIONS", "DevSet", "check_quantize", "layer_groups",
           "needs_reduce_range", "quantize_export", "run_dev", "run_max_drop"]
