"""The model card of an export folder: ``README.md`` with the Hugging Face Hub's metadata
header, so the folder can be uploaded to the Hub as it is (issue 31).

A model card (Mitchell et al., 2019, "Model Cards for Model Reporting", FAT* '19, §4)
states what a model is for, how it was evaluated and on what; the Hub reads the card's
YAML header (``library_name``, ``pipeline_tag``, ``tags`` and ``model-index``, whose
``results`` are the metrics it shows) and ignores keys it does not know, where this
engine keeps the rest under ``nas``: the task, the label names, the report split, the
teacher, the parameter count, the latency, the command that made the folder and the
engine's version.

:func:`write_card` writes it from the folder's ``config.json`` and, when the folder is a
run's result, the run's ``metrics.json`` (metrics are known only after the run's stages,
so the run skeleton writes the card again at the end: ``recipes/common.py``). An export
written outside a run says that its metrics were not measured. ``README.md`` is not in
the export's file list (:func:`nas.runtime.file_manifest`): a card edited for the Hub
does not make the weights suspect.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

# nas.runtime (torch) is imported where a card is written, not here: nas.cli.main imports
# this module for every command, and `nas --version` must not pay for torch

#: The command line of the ``nas`` command now running (set by ``nas.cli.main``).
_COMMAND: contextvars.ContextVar[str | None] = contextvars.ContextVar("nas_command",
                                                                     default=None)


@contextlib.contextmanager
def recorded_command(argv: Sequence[str]) -> Iterator[None]:
    """Within the block, cards name ``nas ARGV...`` as the command that made them."""
    token = _COMMAND.set(shlex.join(["nas", *argv]))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def current_command() -> str:
    """The ``nas`` command running, else this process's command line (the Python API)."""
    return _COMMAND.get() or shlex.join(["python", *sys.argv])


def _params_in(directory: Path) -> int | None:
    """The number of weights in ``model.safetensors`` (read from its header)."""
    from safetensors import safe_open

    from nas.runtime import WEIGHTS_FILE

    try:
        with safe_open(str(directory / WEIGHTS_FILE), framework="pt") as f:
            total = 0
            for key in f.keys():  # noqa: SIM118 (not a dict)
                count = 1
                for size in f.get_slice(key).get_shape():
                    count *= int(size)
                total += count
            return total
    except Exception:  # an unreadable file: the card leaves the count out
        return None


def _facts(directory: Path) -> dict[str, Any]:
    """What the export's ``config.json`` says about the model."""
    from nas.runtime import CONFIG_FILE, FORMAT, label_names, quantization

    config = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    native = config.get("format") == FORMAT
    if native:
        labels = label_names(config)
        space = (config.get("space") or {}).get("name")
        arch_id = (config.get("architecture") or {}).get("id")
        tokenizer = config.get("tokenizer") or {}
    else:
        id2label = config.get("id2label") or {}
        labels = [id2label[k] for k in sorted(id2label, key=int)]
        record = config.get("nas_export") or {}
        space, arch_id = record.get("space"), record.get("arch_id")
        tokenizer = config.get("nas_tokenizer") or {}
    head = config.get("head") if native else None
    return {"task": config.get("task"), "labels": labels, "space": space, "arch_id": arch_id,
            "joint": bool(head), "num_intents": (head or {}).get("num_intents"),
            "trained_length": tokenizer.get("max_length"), "random_init":
            bool(config.get("random_init", False)), "model_type": config.get("model_type"),
            "remote_code": "auto_map" in config, "onnx": bool(config.get("onnx")),
            "int8": quantization(config)}


def _row(metrics: Mapping[str, Any] | None, arch_id: str | None) -> dict[str, Any] | None:
    """The run's row of this model (``searched``), unless it is another architecture's."""
    row = (metrics or {}).get("searched")
    if not isinstance(row, Mapping):
        return None
    if arch_id and row.get("arch_id") and row["arch_id"] != arch_id:
        return None  # e.g. a trial of the run's study exported with --trial
    return dict(row)


def _latency(row: Mapping[str, Any]) -> dict[str, float]:
    latency = row.get("latency") or {}
    return {f"{key}_median_ms": round(float(value["median_ms"]), 3)
            for key, value in latency.items()
            if isinstance(value, Mapping) and "median_ms" in value}


def _numbers(scores: Any) -> dict[str, float]:
    if not isinstance(scores, Mapping):
        return {}
    return {k: float(v) for k, v in scores.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def _int8_block(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the card says of an int8 ``model.onnx``: its dev comparison with fp32 ("not
    measured" outside a run) and both latencies."""
    dev = record.get("dev")
    keys = ("examples", "metric", "fp32", "int8", "change_points", "agreement",
            "max_drop_points", "warning")
    latency = record.get("latency") or {}
    return {"runtime": "onnxruntime, dynamic int8 per channel",
            "dev": {k: dev[k] for k in keys if k in dev} if isinstance(dev, Mapping)
            else "not measured",
            "fp32_layers": len(record.get("excluded_nodes") or []),
            "latency_ms": {k: latency[k]["median_ms"] for k in ("fp32", "int8")
                           if isinstance(latency.get(k), Mapping)},
            "latency_tokens": latency.get("seq_len")}


def card_metadata(directory: Path, metrics: Mapping[str, Any] | None = None,
                  command: str | None = None) -> dict[str, Any]:
    """The card's YAML header (a mapping) for the export in ``directory``; ``metrics``:
    the run's ``metrics.json`` when the folder is a run's result."""
    import nas

    facts = _facts(directory)
    row = _row(metrics, facts["arch_id"])
    evaluation = (metrics or {}).get("evaluation") or {}
    split = str(evaluation.get("split") or "dev") if row is not None else None
    pipeline_tag = "token-classification" if facts["joint"] else "text-classification"
    nas_block: dict[str, Any] = {
        "task": facts["task"], "labels": facts["labels"], "space": facts["space"],
        "architecture_id": facts["arch_id"], "trained_length": facts["trained_length"],
        "params": (row or {}).get("params") or _params_in(directory),
        "random_init": facts["random_init"],
        "command": command or current_command(),
        "engine_version": nas.__version__,
    }
    environment = (metrics or {}).get("environment") or {}
    if environment.get("commit"):
        nas_block["engine_commit"] = environment["commit"]
    if facts["joint"]:
        nas_block["num_intents"] = facts["num_intents"]
    if facts["int8"] is not None:
        nas_block["int8"] = _int8_block(facts["int8"])
    header: dict[str, Any] = {"library_name": "transformers", "pipeline_tag": pipeline_tag,
                              "tags": [t for t in ("nas-engine", facts["space"],
                                                   "custom_code" if facts["remote_code"]
                                                   else None, "onnx" if facts["onnx"]
                                                   else None) if t]}
    if row is not None and split is not None:
        scores = _numbers(row.get(split))
        nas_block["report_split"] = {k: evaluation[k] for k in ("split", "examples",
                                                                  "of_examples", "file")
                                     if k in evaluation}
        nas_block["metrics"] = {split: scores, **({"dev": _numbers(row.get("dev"))}
                                                 if split != "dev" else {})}
        if row.get("seq_len"):
            nas_block["latency_seq_len"] = row["seq_len"]
        nas_block["latency"] = _latency(row)
        teacher = (metrics or {}).get("teacher") or {}
        if teacher:
            nas_block["teacher"] = {"model": teacher.get("model_dir"),
                                    "params": teacher.get("params"),
                                    "metrics": {split: _numbers(teacher.get(split))},
                                    "latency": _latency(teacher)}
        if scores:
            header["model-index"] = [{
                "name": f"{facts['space'] or 'nas'}-{facts['arch_id'] or directory.name}",
                "results": [{
                    "task": {"type": pipeline_tag},
                    "dataset": {"name": str(facts["task"] or "own data"),
                                "type": str(facts["task"] or "custom"), "split": split},
                    "metrics": [{"type": k, "value": v, "name": f"{split} {k}"}
                                for k, v in scores.items()]}]}]
    else:
        nas_block["metrics"] = None  # exported outside a run: nothing was measured here
    header["nas"] = nas_block
    return header


def render_card(directory: Path, metrics: Mapping[str, Any] | None = None,
                command: str | None = None) -> str:
    """The text of the card (:func:`card_metadata` as the header, then the same facts
    and the loading example for people)."""
    import yaml

    header = card_metadata(directory, metrics, command)
    facts = header["nas"]
    title = f"{facts['space'] or 'NAS'} model" + (f" for {facts['task']}" if facts["task"]
                                                  else "")
    lines = ["---", yaml.safe_dump(header, sort_keys=False, allow_unicode=True).rstrip(),
             "---", "", f"# {title}", "",
             "Exported by the NAS engine for compact Transformers "
             f"(version {facts['engine_version']}) with:", "", "```bash",
             facts["command"], "```", ""]
    if facts["random_init"]:
        lines += ["**Untrained**: exported with `--random-init`; its answers mean nothing.",
                  ""]
    lines += [f"- labels: {', '.join(map(str, facts['labels']))}",
              f"- parameters: {facts['params']:,}" if facts["params"] else "- parameters: ?",
              f"- trained length: {facts['trained_length']} tokens (longer inputs are cut "
              "to it, as `nas predict` does)" if facts["trained_length"] else
              "- trained length: not recorded"]
    if facts["metrics"]:
        split = facts["report_split"].get("split", "dev")
        scores = ", ".join(f"{k} {v:.4f}" for k, v in facts["metrics"][split].items()) \
            or "not in the run's row"
        size = facts["report_split"].get("examples")
        of = facts["report_split"].get("of_examples")
        lines.append(f"- {split}: {scores}" + (f" on {size:,} examples" if size else "")
                     + (f" (a seeded sample of {of:,})" if of else ""))
        for key, ms in facts.get("latency", {}).items():
            lines.append(f"- latency {key.removesuffix('_median_ms')}: {ms} ms (median, "
                         f"{facts.get('latency_seq_len', '?')} tokens, the machine that "
                         "ran it)")
        teacher = facts.get("teacher")
        if teacher:
            t_scores = ", ".join(f"{k} {v:.4f}" for k, v in
                                 (teacher["metrics"].get(split) or {}).items())
            params = f"{teacher['params']:,}" if teacher.get("params") else "?"
            lines.append(f"- teacher: {teacher['model']} ({params} parameters"
                         + (f"; {split}: {t_scores}" if t_scores else "") + ")")
    else:
        lines.append("- metrics: not measured (exported outside a run; `nas evaluate DIR` "
                     "scores it)")
    if facts.get("int8"):
        lines += _int8_lines(facts["int8"])
    lines += ["", "## Loading", "", "```python"]
    if header["pipeline_tag"] == "token-classification":  # a joint intent + slot model
        lines += ["from transformers import AutoModel, AutoTokenizer",
                  'model = AutoModel.from_pretrained(".", trust_remote_code=True)',
                  'tokenizer = AutoTokenizer.from_pretrained(".", trust_remote_code=True)',
                  "# model(**tokenizer(text, return_tensors='pt')) gives intent_logits and "
                  "slot_logits"]
    elif "custom_code" in header["tags"]:  # the remote code cuts long inputs itself
        lines += ["from transformers import pipeline",
                  'clf = pipeline("text-classification", model=".", trust_remote_code=True)',
                  'print(clf("a gorgeous, witty, seductive movie"))']
    else:  # a stock class reads past the trained length unless the pipeline truncates
        lines += ["from transformers import pipeline",
                  'clf = pipeline("text-classification", model=".")',
                  'print(clf("a gorgeous, witty, seductive movie", truncation=True))']
    lines += ["```", ""]
    return "\n".join(lines)


def _int8_lines(int8: Mapping[str, Any]) -> list[str]:
    dev = int8["dev"]
    latency = int8["latency_ms"]
    out = ["- model.onnx is int8 (ONNX Runtime dynamic quantisation, per channel); "
           "model.safetensors keeps the fp32 weights it was quantised from"]
    if isinstance(dev, Mapping):
        out.append(f"- int8 vs fp32 on dev ({dev['examples']} examples): {dev['metric']} "
                   f"{dev['fp32']:.2f} -> {dev['int8']:.2f} ({dev['change_points']:+.2f} "
                   f"points), the same answer on {100 * dev['agreement']:.1f}%"
                   + (f"; {dev['warning']}" if dev.get("warning") else ""))
    else:
        out.append("- int8 vs fp32 on dev: not measured (exported outside a run)")
    if latency:
        out.append(f"- latency fp32 {latency.get('fp32')} ms, int8 {latency.get('int8')} ms "
                   f"(ONNX Runtime, batch 1, one thread, {int8['latency_tokens']} tokens, "
                   "the machine that exported it)")
    return out


def write_card(directory: str | Path, metrics: Mapping[str, Any] | None = None,
               command: str | None = None) -> Path:
    """Write (or rewrite) ``README.md`` of the export in ``directory``; returns its path."""
    from nas.checkpoint import atomic_write_text
    from nas.runtime import CARD_FILE

    directory = Path(directory)
    path = directory / CARD_FILE
    atomic_write_text(path, render_card(directory, metrics, command))
    return path


__all__ = ["card_metadata", "current_command", "recorded_command", "render_card",
           "write_card"]
