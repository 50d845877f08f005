"""HW-GPT-Bench's GPT-2 "S" space as a finite-pool space (Sukthanker et al., 2024,
"HW-GPT-Bench: Hardware-Aware Architecture Benchmark for Language Models", §3).

10,000 sub-networks of a trained GPT-2 S super-network, with the perplexity (and
next-token accuracy) on OpenWebText of their *inherited* weights, their parameter count
and their measured CPU latency (``$NAS_DATA_DIR/nasbench/hw_gpt_bench/``, read in
place; its README gives the source and licence). The choices are the benchmark's own:

* ``embed`` ∈ {192, 384, 768}, ``layers`` ∈ {10, 11, 12}, ``bias`` ∈ {false, true};
* per layer ``k`` (``layer{k}.*``; layers 11 and 12 exist only when ``layers`` reaches
  them): ``heads`` ∈ {4, 8, 12} and ``mlp_ratio`` ∈ {2, 3, 4}. The file's per-layer lists
  always hold 12 entries; those past ``layers`` are ignored.

About 2e12 architectures; 10,000 are recorded, all distinct.

Recorded quantities (:class:`nas.pool.Metric`): ``perplexity`` (minimised; noise
relative) and ``accuracy`` (next-token, in points, maximised; noise absolute); the costs
``params`` and ``latency_s``. ``latency_s`` is the median of the row's 10
``cpu_latency_s_runs`` (a run can be an outlier). The 1 % of rows with the highest
median (100 rows, 940–986 s) are dropped from the pool as measurement outliers (the
dataset's README), leaving 9,900 rows. FLOPs are 0 in most rows and are not used.

Caveat, measured on the file: beyond that 1 %, 447 more rows (all ``embed = 192``, the
smallest models) have medians of 100–940 s against 1.0–3.9 s for every other row: their
runs look recorded in milliseconds. They stay in the pool as the brief's rule leaves them,
so their latency is not a real one; a latency budget or front simply never favours them.
"""

from __future__ import annotations

import functools
import statistics
from pathlib import Path

import numpy as np

from nas.choices import Categorical
from nas.pool import (
    Metric,
    PoolSpace,
    benchmark_dir,
    benchmark_file,
    checked,
    malformed,
    read_json,
)
from nas.space import register_space

NAME = "hw-gpt-bench"
TABLE = "hw_gpt_bench/gpt_s_ppl_cpu_latency.json"
MAX_LAYERS = 12
#: the share of rows with the highest median latency left out (outliers)
DROPPED_LATENCY_SHARE = 0.01


def layer_choices(k: int) -> list[Categorical]:
    """The two choices of layer ``k`` (1-based)."""
    return [Categorical(f"layer{k}.heads", (4, 8, 12), 12, kind="other",
                        doc="attention heads"),
            Categorical(f"layer{k}.mlp_ratio", (2, 3, 4), 4, kind="width",
                        doc="MLP width / embedding width")]


def _architecture(entry: dict) -> dict:
    a = entry["arch"]
    depth = int(a["sample_n_layer"])
    heads, ratios = list(a["sample_n_head"]), list(a["sample_mlp_ratio"])
    if not 1 <= depth <= min(len(heads), len(ratios)):
        raise ValueError(f"{depth} layers but {len(heads)} heads and {len(ratios)} MLP ratios")
    arch: dict = {"embed": int(a["sample_embed_dim"]), "layers": depth,
                  "bias": bool(a["sample_bias"])}
    for k in range(1, depth + 1):
        arch |= {f"layer{k}.heads": int(heads[k - 1]), f"layer{k}.mlp_ratio": int(ratios[k - 1])}
    return arch


@functools.lru_cache(maxsize=4)
def _load(folder: Path) -> PoolSpace:
    table = benchmark_file(NAME, folder, TABLE)
    entries = read_json(NAME, table)
    if not isinstance(entries, list) or not entries:
        raise malformed(NAME, table, "expected a non-empty JSON list of rows")

    def read_rows() -> tuple[list[dict], dict[str, list[float]]]:
        rows: list[dict] = []
        metrics: dict[str, list[float]] = {"perplexity": [], "accuracy": [], "params": [],
                                           "latency_s": []}
        for entry in entries:
            rows.append(_architecture(entry))
            metrics["perplexity"].append(float(entry["perplexity"]))
            metrics["accuracy"].append(100.0 * float(entry["accuracy"]))
            metrics["params"].append(float(entry["params"]))
            metrics["latency_s"].append(float(statistics.median(
                float(x) for x in entry["cpu_latency_s_runs"])))
        return rows, metrics

    rows, metrics = checked(NAME, table, read_rows)
    latency = np.asarray(metrics["latency_s"])
    dropped = int(round(DROPPED_LATENCY_SHARE * len(rows)))
    keep = np.ones(len(rows), dtype=bool)
    keep[np.argsort(-latency, kind="stable")[:dropped]] = False
    rows = [r for r, k in zip(rows, keep, strict=True) if k]
    metrics = {m: [x for x, k in zip(v, keep, strict=True) if k] for m, v in metrics.items()}
    choices = [Categorical("embed", (192, 384, 768), 768, kind="width", doc="embedding width"),
               Categorical("layers", (10, 11, MAX_LAYERS), MAX_LAYERS, kind="depth",
                           doc="decoder layers"),
               Categorical("bias", (False, True), True, kind="other", doc="linear biases")]
    choices += [c for k in range(1, MAX_LAYERS + 1) for c in layer_choices(k)]
    info = {"perplexity": Metric("minimize", "score", "relative",
                                 "OpenWebText perplexity, super-network weights"),
            "accuracy": Metric("maximize", "score", "absolute",
                               "next-token accuracy (points), super-network weights"),
            "params": Metric("minimize", "cost", doc="parameters"),
            "latency_s": Metric("minimize", "cost",
                                doc="CPU latency (s, median of 10 runs; batch 32 x 1024)")}
    return PoolSpace(
        NAME, choices, rows, metrics, info, depth="layers",
        layer_choices={k: [c.name for c in layer_choices(k)] for k in range(11, MAX_LAYERS + 1)},
        config={"data_dir": str(folder)},
        description=f"HW-GPT-Bench GPT-2 S (Sukthanker et al., 2024): {len(rows)} recorded "
                    "sub-networks of about 2e12, perplexity, params, CPU latency")


@register_space(NAME, tabular=True)
def hw_gpt_bench_space(data_dir: str | None = None) -> PoolSpace:
    """HW-GPT-Bench's recorded GPT-2 S sub-networks (module docstring); ``data_dir``: the
    folder holding ``hw_gpt_bench/`` (default ``$NAS_DATA_DIR/nasbench``)."""
    return _load(benchmark_dir(data_dir).resolve())
