"""Every bad input of the reliability issue's case list: one line, a meaningful exit code.

Each row runs the ``nas`` command (in-process through :func:`nas.cli.main`, a few also as
a real subprocess) on one malformed or hostile input and checks the exit status (2: bad
usage or input; 1: a failure at run time), that stderr is exactly one line, that no
traceback shows, and the phrase that names the problem. The run folders are written by
hand (a snapshot, a log, a metrics file) and the exports are a one-layer TinyBERT, so the
table needs no search and no teacher.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
import yaml

from nas.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "adabert_smoke.yaml"
TINY = ["--space", "tinybert", "-c", "num_hidden_layers=1", "--random-init"]


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One-layer TinyBERT exports (native, ONNX, transformers), made once per module."""
    root = tmp_path_factory.mktemp("exports")
    made = {}
    for fmt in ("native", "onnx", "hf"):
        assert main(["export", *TINY, "-o", str(root / fmt), "--format", fmt]) == 0
        made[fmt] = root / fmt
    return made


@dataclass
class Ctx:
    """What a case's set-up gets: a fresh folder and the shared exports."""

    tmp: Path
    exports: dict[str, Path]
    processes: list[subprocess.Popen] = field(default_factory=list)  # stopped after the case

    def export_copy(self, fmt: str = "native") -> Path:
        out = self.tmp / f"copy-{fmt}"
        shutil.copytree(self.exports[fmt], out)
        return out

    def edit_config(self, fmt: str, change: Callable[[dict], None]) -> Path:
        out = self.export_copy(fmt)
        config = json.loads((out / "config.json").read_text())
        change(config)
        (out / "config.json").write_text(json.dumps(config))
        return out


def experiment(ctx: Ctx, change: Callable[[dict], None]) -> list[str]:
    """``nas run`` on the smoke experiment with one change."""
    data = yaml.safe_load(SMOKE.read_text())
    change(data)
    path = ctx.tmp / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return ["run", str(path), "--run-dir", str(ctx.tmp / "run"), "--no-progress"]


def fake_run(ctx: Ctx, metrics: str | None = None, log_tail: str = "") -> Path:
    """A run folder as the AdaBERT recipe leaves it after its teacher stage (or, with
    ``metrics``, at the end): its snapshot, log lines, results."""
    from nas.methods import load_experiment

    method, config = load_experiment(SMOKE)
    run = ctx.tmp / "run"
    run.mkdir()
    snapshot = {"method": method.name, **asdict(config)}
    (run / "config.yaml").write_text(yaml.safe_dump(snapshot, sort_keys=False))
    rows = [{"time": 1.0, "stage": "start", "resume": False},
            {"time": 2.0, "stage": "teacher", "metrics": {"accuracy": 0.8}}]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + log_tail)
    if metrics is not None:
        (run / "metrics.json").write_text(metrics)
    return run


def _model(acc: float, params: int) -> dict:
    latency = {f"batch{b}": {"median_ms": 2.0 * b, "seq_len": 32} for b in (1, 32)}
    return {"dev": {"accuracy": acc}, "params": params, "flops": 1000, "latency": latency}


GOOD_METRICS = json.dumps({"metric": "accuracy", "teacher": _model(0.9, 20_000_000),
                           "searched": _model(0.8, 1_000_000)})


def resume(ctx: Ctx, run: Path) -> list[str]:
    return ["run", str(SMOKE), "--run-dir", str(run), "--resume", "--no-progress"]


# ------------------------------------------------------------------------------ set-ups


def truncated_checkpoint(ctx: Ctx) -> list[str]:
    from nas.checkpoint import save_state

    run = fake_run(ctx)
    path = run / "checkpoint.safetensors"
    save_state(path, {"search": {"w": [1.0] * 10}, "epoch": 0})
    path.write_bytes(path.read_bytes()[:-7])
    return resume(ctx, run)


def locked_by_live_process(ctx: Ctx) -> list[str]:
    run = fake_run(ctx)
    sleeper = subprocess.Popen(["sleep", "60"])  # noqa: S607 (a stand-in live process)
    ctx.processes.append(sleeper)
    (run / ".lock").write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname(),
                                           "started": time.time() + 1, "token": "x"}))
    return resume(ctx, run)


def locked_on_other_host(ctx: Ctx) -> list[str]:
    run = fake_run(ctx)
    (run / ".lock").write_text(json.dumps({"pid": 4242, "host": "node-b", "started": 1.0,
                                           "token": "x"}))
    return resume(ctx, run)


def non_utf8_data(ctx: Ctx) -> list[str]:
    from nas.data import resolve_data_dir

    data = ctx.tmp / "data" / "sst2"
    data.mkdir(parents=True)
    lines = (resolve_data_dir() / "sst2" / "train.tsv").read_bytes().split(b"\n")[:12]
    lines[4] = lines[4][:3] + b"\xe9" + lines[4][3:]  # Latin-1 "é" on line 5
    (data / "train.tsv").write_bytes(b"\n".join(lines) + b"\n")
    return ["augment", "--task", "sst2", "--split", "train", "--data-dir",
            str(ctx.tmp / "data"), "--no-progress"]


def int8_on_torch(ctx: Ctx) -> list[str]:
    out = ctx.tmp / "int8"
    assert main(["export", *TINY, "-o", str(out), "--format", "onnx", "--quantize",
                 "int8"]) == 0
    return ["predict", str(out), "a fine film", "--runtime", "torch"]


def onnx_left_behind(ctx: Ctx) -> list[str]:
    out = ctx.export_copy("onnx")
    assert main(["export", *TINY, "-o", str(out), "--overwrite"]) == 0  # native now
    return ["predict", str(out), "a fine film", "--runtime", "onnx"]


def hf_truncated(ctx: Ctx, listed: bool) -> list[str]:
    out = ctx.export_copy("hf")
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    if not listed:  # a plain transformers folder: no file list to catch it
        config = json.loads((out / "config.json").read_text())
        del config["nas_files"]
        (out / "config.json").write_text(json.dumps(config))
    return ["predict", str(out), "a fine film"]


def foreign_folder(ctx: Ctx) -> list[str]:
    (ctx.tmp / "mine").mkdir()
    (ctx.tmp / "mine" / "config.json").write_text('{"someone": "else"}')
    return ["export", *TINY, "-o", str(ctx.tmp / "mine"), "--overwrite"]


def onto_file(ctx: Ctx) -> list[str]:
    (ctx.tmp / "notes.txt").write_text("keep me")
    return ["export", *TINY, "-o", str(ctx.tmp / "notes.txt")]


def name_classes(config: dict, labels: list[str]) -> None:
    """Give an export's classes ``labels`` as the engine writes them: ``id2label`` and
    ``label2id`` alike, and a native export's ``labels`` (keys that disagree are refused)."""
    if "format" in config:
        config["labels"] = labels
    config["id2label"] = {str(i): name for i, name in enumerate(labels)}
    config["label2id"] = {name: i for i, name in enumerate(labels)}


def three_labels(config: dict) -> None:
    name_classes(config, ["neg", "neutral", "pos"])
    config["num_labels"] = 3


# exports that record their task (a random-init export records none), and data files
SST2_LABELS = ["negative", "positive"]


def trained_on(task: str, labels: list[str], text_input: str | None = None,
               fmt: str = "native") -> Callable[[dict], None]:
    """An export edited to record ``task`` and ``labels`` (and ``text_input``), as a run's
    export does."""
    def change(config: dict) -> None:
        config["task"] = task
        name_classes(config, labels)
        if text_input is not None:
            config["text_input"] = text_input
    return change


def data_file(ctx: Ctx, name: str, rows: list[str]) -> str:
    path = ctx.tmp / name
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def reviews(ctx: Ctx, names: tuple[str, str] = ("neg", "pos"), n: int = 40) -> str:
    """A CSV of ``n`` labelled sentences whose labels are ``names``, three in four the
    first (so that a model's accuracy and its complement differ)."""
    return data_file(ctx, "reviews.csv", ["text,label", *(
        f"film number {i} was {'fine' if i % 4 == 0 else 'dull'},{names[i % 4 == 0]}"
        for i in range(n))])


def evaluate_on(ctx: Ctx, rows: list[str], name: str = "mine.csv") -> list[str]:
    export = ctx.edit_config("native", trained_on("sst2", SST2_LABELS))
    return ["evaluate", str(export), "--task", data_file(ctx, name, rows)]


# ------------------------------------------------------------------------------ the table


@dataclass
class Case:
    setup: Callable[[Ctx], list[str]]
    code: int
    phrase: str  # a regular expression the stderr line must contain
    stderr_lines: int = 1


def _set(path: str, value: object) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        *parents, key = path.split(".")
        for p in parents:
            data = data.setdefault(p, {})
        data[key] = value

    return change


def impossible_constraint(ctx: Ctx) -> list[str]:
    """``method: search`` on the example with a parameter limit below its smallest child."""
    data = yaml.safe_load((ROOT / "examples" / "custom_search.yaml").read_text())
    data["plugins"] = [str(ROOT / "examples" / "custom_space.py")]
    data["constraints"] = {"max_params": 1000}
    path = ctx.tmp / "search.yaml"
    path.write_text(yaml.safe_dump(data))
    return ["run", str(path), "--run-dir", str(ctx.tmp / "run"), "--no-progress"]


def smoke_with(method: str, **changes: object) -> Callable[[Ctx], list[str]]:
    """``method``'s smoke file (``experiments/<method>_smoke.yaml``) with ``changes``:
    refused while loading."""
    def setup(ctx: Ctx) -> list[str]:
        data = yaml.safe_load((ROOT / "experiments" / f"{method}_smoke.yaml").read_text())
        data.update(changes)
        path = ctx.tmp / f"{method}.yaml"
        path.write_text(yaml.safe_dump(data))
        return ["run", str(path), "--run-dir", str(ctx.tmp / "run"), "--no-progress"]

    return setup


def compress_with(**changes: object) -> Callable[[Ctx], list[str]]:
    """``method: compress`` (the smoke file) with ``changes``: refused while loading."""
    return smoke_with("compress", **changes)


def compress_transfer(content: bytes | None, name: str = "t.txt", **block: object
                      ) -> Callable[[Ctx], list[str]]:
    """``method: compress`` with ``transfer: {texts: FILE, **block}``, FILE holding
    ``content`` (``None``: no such file)."""
    def setup(ctx: Ctx) -> list[str]:
        path = ctx.tmp / name
        if content is not None:
            path.write_bytes(content)
        return compress_with(transfer={"texts": str(path), **block})(ctx)

    return setup


def tinybert_with(**changes: object) -> Callable[[Ctx], list[str]]:
    """``method: tinybert`` (the smoke file) with ``changes``: refused while loading."""
    return smoke_with("tinybert", **changes)


def search_with(**changes: object) -> Callable[[Ctx], list[str]]:
    """``method: search`` (the example with its space file) with ``changes``."""
    def setup(ctx: Ctx) -> list[str]:
        data = yaml.safe_load((ROOT / "examples" / "custom_search.yaml").read_text())
        data["plugins"] = [str(ROOT / "examples" / "custom_space.py")]
        data.update(changes)
        path = ctx.tmp / "search.yaml"
        path.write_text(yaml.safe_dump(data))
        return ["run", str(path), "--run-dir", str(ctx.tmp / "run"), "--no-progress"]

    return setup


def _drop(key: str) -> Callable[[dict], None]:
    return lambda data: data.pop(key)


def _yaml(change: Callable[[dict], None]) -> Callable[[Ctx], list[str]]:
    return lambda ctx: experiment(ctx, change)


def _cli(*argv: str) -> Callable[[Ctx], list[str]]:
    return lambda ctx: list(argv)


def _predict_edited(change: Callable[[dict], None], fmt: str = "native"
                    ) -> Callable[[Ctx], list[str]]:
    return lambda ctx: ["predict", str(ctx.edit_config(fmt, change)), "a fine film"]


CASES = {
    # a teacher fine-tuned already (teacher_finetune.enabled: false)
    "teacher-labels-without-own-teacher": Case(
        compress_with(teacher_labels={"negative": "LABEL_0", "positive": "LABEL_1"}), 2,
        r"teacher_labels names the labels of a teacher fine-tuned already; set "
        r"teacher_finetune\.enabled=false with it"),
    "teacher-labels-not-a-mapping": Case(
        compress_with(teacher_finetune={"enabled": False}, teacher_labels=["LABEL_0"]), 2,
        r"teacher_labels: expected dict or NoneType, got \['LABEL_0'\]"),
    "own-teacher-without-a-head": Case(
        compress_with(teacher_finetune={"enabled": False}), 2,
        r"not a fine-tuned classifier .*set teacher_finetune\.enabled=true"),
    # transfer text: a file that cannot be read, before the teacher stage
    "transfer-missing": Case(compress_transfer(None), 2,
                             r"transfer\.texts: .*t\.txt: no such file"),
    "transfer-empty": Case(compress_transfer(b""), 2, r"transfer\.texts: .*t\.txt: no text in it"),
    "transfer-binary": Case(compress_transfer(b"\x00\x01\x02binary"), 2,
                            r"transfer\.texts: .*t\.txt: a binary file, not text"),
    "transfer-bad-column": Case(compress_transfer(b"sentence,x\nhello,1\n", "t.csv",
                                                  text="review"), 2,
                                r"transfer\.texts: .*t\.csv: no column 'review' \(the columns "
                                r"are 'sentence', 'x'\); pass transfer\.text NAME"),
    "transfer-pair-task": Case(lambda ctx: [*compress_transfer(b"text\nsome text\n")(ctx),
                                            "--set", "task=mrpc"], 2,
                               r"transfer\.texts: .*t\.txt: the task reads sentence pairs; "
                               r"name the second text's column as transfer\.text_pair"),
    "transfer-other-method": Case(tinybert_with(transfer={"texts": "x.txt"}), 2,
                                  r"transfer: method tinybert does not distil on transfer text"),
    "final-chain-without-latency": Case(compress_with(objectives=["accuracy"],
                                                      final={"select": "best", "chain": True}),
                                        2, r"final\.chain orders the chosen points by the "
                                           r"study's latency"),
    "layer-mapping": Case(compress_with(evaluator={"name": "inherited-kd", "settings": {
        "layer_mapping": "middle"}}), 2, r"layer_mapping must be sliced or uniform or last"),
    # method compress: the space is the teacher's own
    "compress-other-space": Case(compress_with(space="bert"), 2,
                                 r"space: method compress searches 'bert-subnet'"),
    # latency: {source, runtime}; a bare string is the source
    "compress-latency-runtime": Case(
        compress_with(latency={"source": "predicted", "runtime": "tflite"}), 2,
        r"latency: runtime must be torch or onnx or onnx-int8, got 'tflite'"),
    "compress-latency-source": Case(compress_with(latency="guessed"), 2,
                                    r"latency: source must be predicted or measured, got "
                                    r"'guessed' \(or \{source: \.\.\., runtime: "),
    "compress-teacher-shape": Case(compress_with(space_config={"hidden_size": 64}), 2,
                                   r"space_config\.hidden_size: method compress takes the "
                                   r"shape from the teacher"),
    # searcher knapsack: compress's own, and only where its block table can serve
    "compress-knapsack-first-k": Case(compress_with(searcher="knapsack",
                                                    space_config={"layers": "first"}), 2,
                                      r"searcher: knapsack queues architectures of the any-subset"),
    "compress-knapsack-workers": Case(compress_with(searcher="knapsack", workers=2), 2,
                                      r"workers: searcher knapsack runs its picks in one "
                                      r"process"),
    "compress-knapsack-flops": Case(compress_with(searcher="knapsack",
                                                  constraints={"max_flops": 1e9}), 2,
                                    r"constraints\.max_flops: searcher knapsack costs its picks by "
                                    r"the block table"),
    "compress-knapsack-cost": Case(compress_with(searcher="knapsack",
                                                 knapsack={"cost": "flops"}), 2,
                                   r"knapsack.*cost.*latency_ms or params"),
    "compress-knapsack-seeds": Case(compress_with(searcher="knapsack",
                                                  multi_trial={"seeds": ["default"]}), 2,
                                    r"multi_trial\.seeds: searcher knapsack's study runs its own "
                                    r"picks only"),
    "compress-truncation-workers": Case(compress_with(searcher="truncation", workers=2), 2,
                                        r"workers: searcher truncation runs its picks in one "
                                        r"process"),
    "compress-seed-truncations-knapsack": Case(
        compress_with(searcher="knapsack", seed_truncations=True), 2,
        r"seed_truncations: searcher knapsack has no study to seed"),
    "compress-seed-truncations-flag": Case(
        lambda ctx: [*compress_with(seed_truncations=True)(ctx), "--searcher", "truncation"],
        2, r"seed_truncations: searcher truncation has no study to seed"),
    "compress-final-train-examples": Case(compress_with(final={"train_examples": "most"}), 2,
                                          r"final: train_examples must be all, or an integer"),
    "search-truncation": Case(search_with(searcher="truncation"), 2,
                              r"searcher: truncation needs the sorted teacher's shape .*"
                              r"which only method compress makes"),
    "search-knapsack-flag": Case(lambda ctx: [*search_with()(ctx), "--searcher", "knapsack"], 2,
                                 r"--searcher knapsack needs the sorted teacher's blockwise "
                                 r"table"),
    "compress-truncation-flag-workers": Case(
        lambda ctx: [*compress_with(workers=2)(ctx), "--searcher", "truncation"], 2,
        r"workers: searcher truncation runs its picks in one process"),
    "search-knapsack": Case(search_with(searcher="knapsack"), 2,
                            r"searcher: knapsack needs the sorted teacher's blockwise table .*"
                            r"which only method compress makes"),
    "compress-knapsack-n-trials-flag": Case(
        lambda ctx: [*compress_with(searcher="knapsack")(ctx), "--n-trials", "3"], 2,
        r"--n-trials needs a multi-trial searcher .*not knapsack"),
    # experiment YAML
    "yaml-missing-name": Case(_yaml(_drop("name")), 2, r"bad\.yaml: missing key 'name'"),
    "yaml-missing-task": Case(_yaml(_drop("task")), 2, r"bad\.yaml: missing key 'task'"),
    "yaml-missing-method": Case(_yaml(_drop("method")), 2,
                                r"bad\.yaml: missing key 'method' \(one of: .*adabert"),
    "yaml-unknown-method": Case(_yaml(_set("method", "adabertt")), 2,
                                r"unknown method 'adabertt'; did you mean 'adabert'"),
    "yaml-search-epochs-0": Case(_yaml(_set("search.epochs", 0)), 2,
                                 r"bad\.yaml.*search.*epochs"),
    "yaml-search-epochs-neg": Case(_yaml(_set("search.epochs", -1)), 2,
                                   r"bad\.yaml.*search.*epochs"),
    "yaml-search-batch-0": Case(_yaml(_set("search.batch_size", 0)), 2,
                                r"bad\.yaml.*search.*batch_size"),
    "yaml-retrain-batch-neg": Case(_yaml(_set("retrain.batch_size", -8)), 2,
                                   r"bad\.yaml.*retrain.*batch_size"),
    "yaml-checkpoint-every-0": Case(_yaml(_set("search.checkpoint_every", 0)), 2,
                                    r"bad\.yaml.*checkpoint_every"),
    "yaml-teacher-finetune-typo": Case(_yaml(_set("teacher_finetune.epocs", 1)), 2,
                                       r"bad\.yaml.*teacher_finetune.*epocs"),
    "yaml-random-samples-old": Case(_yaml(_set("random_samples", 3)), 2,
                                    r"bad\.yaml.*random_samples is now multi_trial\.n_trials"),
    "yaml-lr-nan": Case(_yaml(_set("search.lr", float("nan"))), 2,
                        r"bad\.yaml\.search\.lr: expected a finite number, got nan"),
    "search-constraint-no-architecture-meets": Case(
        impossible_constraint, 2, r"constraints: no architecture of space 'tiny-cell' meets "
                                  r"them; the smallest of all 27 architectures: params .*raise "
                                  r"constraints\.max_params to at least 994,274"),
    # a tabular benchmark whose data folder lacks the file
    "tabular-benchmark-missing": Case(
        lambda ctx: ["spaces", "show", "nas-bench-bert", "-c", f"data_dir={ctx.tmp}"], 2,
        r"nas-bench-bert: benchmark file .*BERT_benchmark\.json not found; set NAS_DATA_DIR"),
    # data
    "data-non-utf8-line-5": Case(non_utf8_data, 2,
                                 r"sst2/train\.tsv:5: not UTF-8 text \(byte 0xe9 at column 4\)"),
    # exports
    "export-tokenizer-deleted": Case(
        lambda ctx: ["predict", str(_without(ctx.export_copy(), "tokenizer.json", "vocab.txt")),
                     "a fine film"], 2, r"tokenizer\.json: missing \(the export lists it\)"),
    # int8 exports: ONNX only, and the bound goes with the quantisation
    "export-quantize-native": Case(
        lambda ctx: ["export", *TINY, "-o", str(ctx.tmp / "q"), "--quantize", "int8"], 2,
        r"--quantize int8 needs --format onnx \(it quantises model\.onnx\), got --format "
        r"native"),
    "export-int8-drop-alone": Case(
        lambda ctx: ["export", *TINY, "-o", str(ctx.tmp / "q"), "--format", "onnx",
                     "--max-int8-drop", "0.5"], 2, r"--max-int8-drop goes with --quantize int8"),
    "predict-int8-on-torch": Case(int8_on_torch, 2, r"an int8 export answers from model\.onnx; "
                                                    r"use --runtime onnx"),
    "export-trim-vocab-without-run": Case(
        lambda ctx: ["export", *TINY, "-o", str(ctx.tmp / "t"), "--trim-vocab"], 2,
        r"--trim-vocab goes with --run RUN_DIR \(the run's task gives the train texts"),
    "compress-final-trim-vocab-not-bool": Case(
        compress_with(final={"select": "best", "export": {"trim_vocab": 2}}), 2,
        r"final\.export\.trim_vocab: expected bool, got 2"),
    "compress-final-int8-native": Case(
        compress_with(final={"select": "best", "export": {"quantize": "int8"}}), 2,
        r"final\.export: quantize must be int8, with format: onnx"),
    "export-old-onnx-refused": Case(
        lambda ctx: ["export", *TINY, "-o", str(ctx.export_copy("onnx"))], 2,
        r"holds a previous export; pass --overwrite"),
    "export-old-onnx-replaced": Case(onnx_left_behind, 2,
                                     r"model\.onnx: missing; export with --format onnx"),
    "export-foreign-folder": Case(foreign_folder, 2, r"not empty and not an export of this "
                                                      r"tool"),
    "export-onto-file": Case(onto_file, 2, r"notes\.txt: is a file, and a folder is expected"),
    "export-labels-empty": Case(_predict_edited(_set("labels", [])), 2,
                                r"config\.json: labels must be a non-empty list"),
    "export-vocab-negative": Case(_predict_edited(_set("vocab_size", -5)), 2,
                                  r"config\.json: vocab_size must be a positive integer, "
                                  r"got -5"),
    "export-format-version-word": Case(_predict_edited(_set("format_version", "one")), 2,
                                       r"config\.json: format_version must be an integer, "
                                       r"got 'one'"),
    "export-three-labels": Case(_predict_edited(three_labels), 2,
                                r"config\.json: 3 labels for a model with 2 outputs"),
    "export-three-labels-only": Case(_predict_edited(_set("labels", ["a", "b", "c"])), 2,
                                     r"config\.json: num_labels is 2 but 3 labels"),
    "export-hf-three-labels": Case(_predict_edited(
        lambda config: name_classes(config, ["a", "b", "c"]), "hf"), 2,
        r"3 labels \(id2label\) for a classifier with 2 outputs"),
    "export-hf-truncated": Case(lambda ctx: hf_truncated(ctx, listed=True), 2,
                                r"model\.safetensors: changed since the export was written"),
    "export-hf-truncated-unlisted": Case(lambda ctx: hf_truncated(ctx, listed=False), 2,
                                         r"transformers cannot load it .*incomplete metadata"),
    # scores that would mean nothing: the export's task, input kind and labels must fit
    "evaluate-other-task": Case(lambda ctx: [
        "evaluate", str(ctx.edit_config("native", trained_on("sst2", SST2_LABELS))),
        "--task", "mrpc"], 2, r"trained on task 'sst2', not 'mrpc'; evaluate it with --task "
                              r"sst2"),
    "evaluate-hf-other-task": Case(lambda ctx: [
        "evaluate", str(ctx.edit_config("hf", trained_on("sst2", SST2_LABELS, fmt="hf"))),
        "--task", "mrpc"], 2, r"trained on task 'sst2', not 'mrpc'"),
    "evaluate-label-names-differ": Case(lambda ctx: [
        "evaluate", str(ctx.edit_config("native", trained_on("sst2", SST2_LABELS))),
        "--task", reviews(ctx)], 2,
        r"the model's labels are \(negative, positive\), the data's \(task 'reviews-\w+'\) "
        r"are \(neg, pos\); 'neg' is not a label of the model: .*--label-map"),
    "evaluate-label-map-wrong": Case(lambda ctx: [
        "evaluate", str(ctx.edit_config("native", trained_on("sst2", SST2_LABELS))),
        "--task", reviews(ctx), "--label-map", "neg=negative,pos=postive"], 2,
        r"'pos' \(mapped to 'postive'\) is not a label of the model"),
    "evaluate-label-map-unknown": Case(lambda ctx: [
        "evaluate", str(ctx.edit_config("native", trained_on("sst2", SST2_LABELS))),
        "--task", reviews(ctx), "--label-map", "bad=negative"], 2,
        r"--label-map names 'bad', which is not a label of task 'reviews-\w+' \(neg, pos\)"),
    "evaluate-label-map-malformed": Case(lambda ctx: [
        "evaluate", str(ctx.exports["native"]), "--task", "sst2", "--label-map", "neg"], 2,
        r"--label-map expects DATA=MODEL pairs separated by commas"),
    "evaluate-pair-model-single-data": Case(lambda ctx: [
        "evaluate", str(ctx.edit_config("native", trained_on("mine", SST2_LABELS, "pair"))),
        "--task", reviews(ctx, ("negative", "positive"))], 2,
        r"the model reads a pair of texts per example, task 'reviews-\w+' gives one text"),
    "predict-second-text": Case(lambda ctx: [
        "predict", str(ctx.edit_config("native", trained_on("sst2", SST2_LABELS))), "a", "b"],
        2, r"\(task sst2\) reads one text, got a second; pass one text"),
    "predict-pair-one-text": Case(lambda ctx: [
        "predict", str(ctx.edit_config("native", trained_on("mrpc", ["no", "yes"], "pair"))),
        "a"], 2, r"\(task mrpc\) reads a pair of texts, got one; pass both texts"),
    "predict-non-utf8": Case(lambda ctx: ["predict", str(ctx.exports["native"]),
                                          os.fsdecode(b"caf\xe9 au lait")], 2,
                             r"text 'caf.*: not UTF-8 \(byte 0xe9 at position 3\); pass the "
                             r"text as UTF-8"),
    "export-max-length-absurd": Case(_predict_edited(_set("tokenizer.max_length", 100000)), 2,
                                     r"config\.json: tokenizer\.max_length is 100000, beyond "
                                     r"the model's 512 positions; set it to at most 512"),
    "export-hf-max-length-absurd": Case(
        _predict_edited(_set("nas_tokenizer.max_length", 100000), "hf"), 2,
        r"config\.json: nas_tokenizer\.max_length is 100000, beyond the model's 512 positions"),
    # data files: no text, or nothing to score
    "data-whitespace-text": Case(lambda ctx: evaluate_on(
        ctx, ["text,label", "fine,positive", "   ,negative", "dull,negative"]), 2,
        r"mine\.csv: row 2: the text in column 'text' is only whitespace; fill it in or "
        r"remove the row"),
    "data-empty-text": Case(lambda ctx: evaluate_on(
        ctx, ['{"text": "fine", "label": "positive"}', '{"text": "", "label": "negative"}'],
        "mine.jsonl"), 2, r"mine\.jsonl: row 2: the text in column 'text' is empty"),
    "data-all-texts-blank": Case(lambda ctx: evaluate_on(
        ctx, ["text,label", *[" \t,positive", " ,negative"] * 5]), 2,
        r"mine\.csv: row 1: the text in column 'text' is only whitespace"),
    "data-no-row": Case(lambda ctx: evaluate_on(ctx, ["text,label"]), 2,
                        r"mine\.csv: empty file"),
    # runs
    "run-truncated-checkpoint": Case(truncated_checkpoint, 2,
                                     r"checkpoint\.safetensors: not a readable checkpoint"),
    "run-log-cut-off": Case(
        lambda ctx: ["report", str(fake_run(ctx, GOOD_METRICS, '{"time": 3.0, "stage": "se'))],
        0, r"^warning: .*log\.jsonl:3: cut-off line skipped"),
    "run-metrics-corrupt": Case(lambda ctx: ["report", str(fake_run(ctx, '{"teacher": {'))], 2,
                                r"metrics\.json: broken JSON at line 1 column 14"),
    "run-metrics-incomplete": Case(lambda ctx: ["report", str(fake_run(ctx, '{"metric": 1}'))],
                                   2, r"metrics\.json: expected a JSON object with the "
                                      r"teacher's results"),
    "run-resume-missing": Case(lambda ctx: resume(ctx, ctx.tmp / "nothing"), 2,
                               r"nothing holds no run to resume; drop --resume"),
    "run-resume-empty": Case(lambda ctx: resume(ctx, _mkdir(ctx.tmp / "empty")), 2,
                             r"empty holds no run to resume; drop --resume"),
    "run-second-writer": Case(locked_by_live_process, 2,
                              r"run is in use by process \d+ on .*; wait for it or stop it"),
    "run-other-host-lock": Case(locked_on_other_host, 2,
                                r"locked by process 4242 on node-b.*pass --break-lock"),
    # command-line values
    "cost-seq-len-beyond": Case(_cli("cost", "adabert", "--seq-len", "100000"), 2,
                                r"sequence length 100000 is beyond the 512 positions"),
    "cost-seq-len-beyond-latency": Case(
        _cli("cost", "adabert", "--seq-len", "100000", "--latency"), 2,
        r"sequence length 100000 is beyond the 512 positions"),
    "bench-seq-len-beyond": Case(
        lambda ctx: ["bench", str(ctx.exports["native"]), "--seq-len", "1000"], 2,
        r"sequence length 1000 is beyond the 512 positions of the model"),
    "space-hidden-abc": Case(_cli("cost", "adabert", "-c", "hidden=abc"), 2,
                             r"space 'adabert': hidden must be an integer, got 'abc'"),
    "space-hidden-negative": Case(_cli("cost", "adabert", "-c", "hidden=-5"), 2,
                                  r"hidden must be a positive integer, got -5"),
    "space-hidden-zero": Case(_cli("spaces", "show", "adabert", "-c", "hidden=0"), 2,
                              r"hidden must be a positive integer, got 0"),
    "sample-seed-negative": Case(_cli("spaces", "sample", "adabert", "--seed", "-1"), 2,
                                 r"--seed: expected a seed, an integer in \[0, 4294967295\], "
                                 r"got '-1'"),
    "arch-json-list": Case(_cli("cost", "adabert", "--arch", "[1,2,3]"), 2,
                           r"inline JSON: expected a JSON object of choices, got list"),
    "cost-seq-len-zero": Case(_cli("cost", "adabert", "--seq-len", "0"), 2,
                              r"--seq-len: expected a positive integer, got '0'"),
}
#: cases also run as a real ``nas`` process (the entry point, not just ``main``)
AS_PROCESS = ("space-hidden-abc", "export-labels-empty", "predict-non-utf8")


def _without(folder: Path, *names: str) -> Path:
    for name in names:
        (folder / name).unlink()
    return folder


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _params() -> list:
    return [pytest.param(name, id=name) for name in CASES]


@pytest.fixture
def refuse_to_run(monkeypatch):
    """A configuration that gets past loading must not start a search in this test."""
    from nas.methods import METHODS

    def refuse(self, config, options):
        raise RuntimeError("the configuration was accepted and the run started")

    monkeypatch.setattr(METHODS.get("adabert"), "run", refuse)


def _run_in_process(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    return int(code or 0), capsys.readouterr().err


@pytest.mark.parametrize("name", _params())
def test_bad_input_gives_one_line(name, tmp_path, exports, capsys, request):
    case = CASES[name]
    if name.startswith("yaml-"):
        request.getfixturevalue("refuse_to_run")
    ctx = Ctx(tmp_path, exports)
    argv = case.setup(ctx)
    capsys.readouterr()  # set-up output is not the case's
    try:
        code, err = _run_in_process(argv, capsys)
    finally:
        for process in ctx.processes:
            process.kill()
            process.wait()
    lines = err.splitlines()
    assert "Traceback" not in err
    assert len(lines) == case.stderr_lines, err
    assert re.search(case.phrase, lines[0]), lines[0]
    assert code == case.code, err
    if case.code:
        assert lines[0].startswith("error: ")
    assert not (tmp_path / "pwned").exists()  # no payload ever ran


@pytest.mark.parametrize("name", AS_PROCESS)
def test_the_real_command_prints_the_same_line(name, tmp_path, exports):
    case = CASES[name]
    argv = case.setup(Ctx(tmp_path, exports))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    out = subprocess.run([sys.executable, "-m", "nas.cli", *argv], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == case.code
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    assert re.search(case.phrase, out.stderr)


def test_debug_shows_the_traceback(tmp_path, exports):
    """``--debug`` is the one way to get a traceback: for a bad export config too."""
    from nas.errors import ExportError

    out = Ctx(tmp_path, exports).edit_config("native", _set("labels", []))
    with pytest.raises(ExportError, match="labels must be a non-empty list"):
        main(["--debug", "predict", str(out), "a fine film"])


def _accuracy(argv: list[str], capsys) -> float:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["metrics"]["accuracy"]


def test_labels_match_by_name_never_by_position(tmp_path, exports, capsys):
    """The same file scores the same under the model's names or a --label-map onto them,
    and a swapped map scores the complement: labels are matched by name, not by position
    (``neg/pos`` against ``negative/positive`` was once scored by position)."""
    ctx = Ctx(tmp_path, exports)
    export = str(ctx.edit_config("native", trained_on("sst2", SST2_LABELS)))
    on = ["--split", "train"]  # 36 examples, 3 in 4 of the first label
    same = _accuracy(["evaluate", export, "--task", reviews(ctx, ("negative", "positive")),
                      *on], capsys)
    mapped = _accuracy(["evaluate", export, "--task", reviews(ctx), *on,
                        "--label-map", "neg=negative,pos=positive"], capsys)
    swapped = _accuracy(["evaluate", export, "--task", reviews(ctx), *on,
                         "--label-map", "neg=positive, pos=negative"], capsys)
    assert same != pytest.approx(0.5)  # else the swap below would prove nothing
    assert mapped == pytest.approx(same)
    assert swapped == pytest.approx(1 - same)


def test_exports_record_their_text_input(tmp_path):
    """A run's export records whether the model reads one text or a pair, so nas predict
    can refuse the other even for a task registered only in the run's process."""
    from nas.export import _text_input

    assert _text_input(["input_ids", "attention_mask"], "sst2") == "single"
    assert _text_input(["input_ids", "attention_mask", "token_type_ids"], "mrpc") == "pair"
    assert _text_input(["input_ids", "input_ids_b"], None) == "pair"
    assert _text_input(["input_ids"], None) is None
