"""NAS-Bench-BERT as a finite-pool space (Serianni & Kalita, 2023, "Training-free Neural
Architecture Search for RNNs and Transformers", §4).

500 small BERT-like encoders, each pre-trained ELECTRA-style and fine-tuned on GLUE, with
their dev scores, parameter counts and 7 training-free proxies
(``$NAS_DATA_DIR/nasbench/nas_bench_bert/``, read in place; its README gives the source
and licence). The choices are the benchmark's own dimensions:

* ``hidden`` ∈ {128, 256}, ``layers`` ∈ {2, 4};
* per layer ``k`` (``layer{k}.*``; layers 3 and 4 exist only when ``layers = 4``):
  ``op`` (self-attention ``sa_sdp`` / ``sa_wma``, linear transform ``lt_dft`` /
  ``lt_dct``, depthwise-separable convolution ``dsc_5`` / ``dsc_9``), ``heads`` ∈ {2, 4},
  ``ffn`` (FFN width) ∈ {512, 1024} and ``ffn_stacks`` (stacked FFNs) ∈ {1, 3}.

About 1e7 architectures; 491 are recorded. Nine are recorded twice with different
scores: their scores and proxies are **averaged** (the 9 pairs differ by up to 2 points
on SST-2, the benchmark's own seed noise), so the pool holds 491 rows.

Recorded quantities (:class:`nas.pool.Metric`): the GLUE dev scores ``cola``, ``mnli``,
``mrpc``, ``qnli``, ``qqp``, ``rte``, ``sst``, ``sts`` and their average ``glue``
(points, maximised; noise absolute); the cost ``params``; the proxies
``synaptic_diversity``, ``synaptic_saliency``, ``activation_distance``,
``jacobian_score``, ``head_importance``, ``head_confidence``,
``head_softmax_confidence`` (raw values of the CSV, higher predicts better).
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

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

NAME = "nas-bench-bert"
FOLDER = "nas_bench_bert"
TABLE = f"{FOLDER}/BERT_benchmark.json"
PROXY_TABLE = f"{FOLDER}/BERT_results_activation.csv"
LAYERS = 4

#: the file's (operation_type, operation_parameter) → the op choice's value
OPS = {("SA", "SDP"): "sa_sdp", ("SA", "WMA"): "sa_wma", ("LT", "DFT"): "lt_dft",
       ("LT", "DCT"): "lt_dct", ("DSC", "5"): "dsc_5", ("DSC", "9"): "dsc_9"}
#: the scores, the GLUE average first (the ``tabular`` evaluator's default objective)
TASKS = ("glue", "cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst", "sts")
#: the CSV's proxy columns (raw, not "Normalized") → metric names
PROXIES = {"Synaptic Diversity": "synaptic_diversity", "Synaptic Saliency": "synaptic_saliency",
           "Activation Distance": "activation_distance", "Jacobian Score": "jacobian_score",
           "Head Importance": "head_importance", "Head Confidence": "head_confidence",
           "Head Softmax Confidence": "head_softmax_confidence"}


def layer_choices(k: int) -> list[Categorical]:
    """The four choices of layer ``k`` (1-based)."""
    return [
        Categorical(f"layer{k}.op", tuple(OPS.values()), "sa_sdp", kind="op",
                    doc="token mixer: self-attention (SDP, WMA), linear transform (DFT, DCT) "
                        "or depthwise-separable convolution (kernel 5, 9)"),
        Categorical(f"layer{k}.heads", (2, 4), 4, kind="other", doc="operation heads"),
        Categorical(f"layer{k}.ffn", (512, 1024), 512, kind="width", doc="FFN width"),
        Categorical(f"layer{k}.ffn_stacks", (1, 3), 1, kind="other", doc="stacked FFNs"),
    ]


def _architecture(entry: dict) -> dict:
    overrides = entry["hparams"]["model_hparam_overrides"]
    layers = overrides["nas_config"]["encoder_layers"]
    arch: dict = {"hidden": int(overrides["hidden_size"]), "layers": len(layers)}
    for k, layer in enumerate(layers, start=1):
        op = (str(layer["operation_type"]), str(layer["operation_parameter"]))
        if op not in OPS:
            raise ValueError(f"unknown operation {op}")
        arch |= {f"layer{k}.op": OPS[op], f"layer{k}.heads": int(layer["num_operation_heads"]),
                 f"layer{k}.ffn": int(layer["feed_forward_dimension"]),
                 f"layer{k}.ffn_stacks": int(layer["num_feed_forward"])}
    return arch


@functools.lru_cache(maxsize=4)
def _load(folder: Path) -> PoolSpace:
    table = benchmark_file(NAME, folder, TABLE)
    proxy_table = benchmark_file(NAME, folder, PROXY_TABLE)
    entries = read_json(NAME, table)
    if not isinstance(entries, list) or not entries:
        raise malformed(NAME, table, "expected a non-empty JSON list of rows")

    def read_proxies() -> dict[int, dict[str, float]]:
        with proxy_table.open(newline="") as f:
            return {int(r["ID"]): {"params": float(r["Number of Parameters"]),
                                   **{m: float(r[col]) for col, m in PROXIES.items()}}
                    for r in csv.DictReader(f)}

    proxies = checked(NAME, proxy_table, read_proxies)
    choices = [Categorical("hidden", (128, 256), 256, kind="width", doc="hidden size"),
               Categorical("layers", (2, LAYERS), LAYERS, kind="depth", doc="encoder layers")]
    choices += [c for k in range(1, LAYERS + 1) for c in layer_choices(k)]
    # duplicates are averaged: the pool keeps the first row's position
    merged: dict[str, tuple[dict, list[dict[str, float]]]] = {}

    def read_rows() -> None:
        for entry in entries:
            arch = _architecture(entry)
            values = {t: float(entry["scores"][t]) for t in TASKS} | proxies[int(entry["id"])]
            key = repr(sorted(arch.items()))
            merged.setdefault(key, (arch, []))[1].append(values)

    checked(NAME, table, read_rows)
    rows = [arch for arch, _ in merged.values()]
    metrics = {m: [sum(v[m] for v in vs) / len(vs) for _, vs in merged.values()]
               for m in next(iter(merged.values()))[1][0]}
    info = {t: Metric("maximize", "score", "absolute", f"GLUE dev score of {t} (points)")
            for t in TASKS}
    info["params"] = Metric("minimize", "cost", doc="parameters")
    info |= {m: Metric("maximize", "proxy", doc=f"training-free proxy {col}")
             for col, m in PROXIES.items()}
    return PoolSpace(
        NAME, choices, rows, metrics, info, depth="layers",
        layer_choices={k: [c.name for c in layer_choices(k)] for k in range(3, LAYERS + 1)},
        config={"data_dir": str(folder)},
        description=f"NAS-Bench-BERT (Serianni & Kalita, 2023): {len(rows)} recorded small "
                    "BERT encoders of about 1e7, GLUE dev scores, params, 7 proxies")


@register_space(NAME, tabular=True)
def nasbench_bert_space(data_dir: str | None = None) -> PoolSpace:
    """NAS-Bench-BERT's recorded encoders (module docstring); ``data_dir``: the folder
    holding ``nas_bench_bert/`` (default ``$NAS_DATA_DIR/nasbench``)."""
    return _load(benchmark_dir(data_dir).resolve())
