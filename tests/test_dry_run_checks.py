"""``nas run --dry-run`` refuses what the run refuses, in the same line: both call
:meth:`nas.methods.Method.validate` first, so "it would run" means it would.

Each case is a bad configuration of one kind (constraints no architecture meets, device
and precision, evaluator settings, seeds, ``space_config``, the head against the task's
labels, the run folder and the study storage, duplicate objectives, the teacher's shape)
run twice in-process, with and without ``--dry-run``: both exit 2 with the same one-line
refusal, and the real run refuses before any work (no run folder written, no teacher
fine-tuned: stage 1 is replaced by a sentinel that fails the case). Every shipped
experiment and example then passes its dry run, which now includes those checks.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from nas.cli import main
from tests.test_config_values import _run, edited

ROOT = Path(__file__).resolve().parents[1]
SEARCH = ROOT / "examples" / "custom_search.yaml"
TINYBERT = ROOT / "experiments" / "tinybert_smoke.yaml"
MOBILEBERT = ROOT / "experiments" / "mobilebert_smoke.yaml"


@dataclass
class Case:
    write: Callable[[Path], Path]  # the experiment file, written into the case's folder
    phrase: str  # a regular expression the one stderr line must contain
    flags: Callable[[Path], list[str]] = lambda tmp: []  # more arguments (the folder given)
    run_dir: Callable[[Path], Path] = lambda tmp: tmp / "run"  # made ready by the case
    without_gpu: bool = False  # a refusal only a machine without a CUDA GPU gives


def _file(tmp: Path) -> Path:
    path = tmp / "occupied"
    path.write_text("not a folder\n")
    return path


def _finished_run(tmp: Path) -> Path:
    """A run folder whose run finished a stage (another run's, for this configuration)."""
    run = tmp / "other"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "search", "name": "other"}))
    (run / "metrics.json").write_text(json.dumps({"metric": "accuracy"}))
    return run


def _folder(tmp: Path) -> Path:
    (tmp / "a-folder").mkdir()
    return tmp / "a-folder"


CASES = {
    "constraint-nobody-meets": Case(edited(SEARCH, constraints={"max_params": 1000}),
                                    r"no architecture of space 'tiny-cell' meets them"),
    "device-cuda-without-gpu": Case(edited(SEARCH), r"device cuda: no CUDA GPU",
                                    flags=lambda tmp: ["--device", "cuda"], without_gpu=True),
    "precision-fp16-on-cpu": Case(edited(SEARCH, precision="fp16"),
                                  r"precision fp16 needs a CUDA device", without_gpu=True),
    "evaluator-settings": Case(edited(SEARCH, evaluator__settings__epochs=0),
                               r"evaluator\.settings \('distilled-retrain'\): epochs must be"),
    "seed-out-of-range": Case(edited(SEARCH, seed=-1), r"seed must be an integer in \[0, "),
    "space-config-value": Case(edited(SEARCH, space_config={"hidden": 0}),
                               r"space_config: space 'tiny-cell': hidden must be a positive"),
    "head-against-labels": Case(edited(SEARCH, space_config={"hidden": 32, "num_labels": 3}),
                                r"its head gives 3 outputs and the task has 2 labels"),
    "duplicate-objectives": Case(edited(SEARCH, objectives=["accuracy", "params", "params"]),
                                 r"objectives: 'params' is listed twice"),
    "run-dir-is-a-file": Case(edited(SEARCH), r"is a file, not a run directory",
                              run_dir=_file),
    "run-dir-holds-a-run": Case(edited(SEARCH), r"already holds a run; pass --resume",
                                run_dir=_finished_run),
    "resume-without-a-run": Case(edited(SEARCH), r"holds no run to resume",
                                 flags=lambda tmp: ["--resume"]),
    "storage-is-a-folder": Case(edited(SEARCH), r"is a folder; name a journal file",
                                flags=lambda tmp: ["--set", f"storage={_folder(tmp)}"]),
    "teacher-shape-tinybert": Case(edited(TINYBERT, student__config__num_attention_heads=4),
                                   r"num_attention_heads is 4, the teacher has 12"),
    "teacher-shape-mobilebert": Case(edited(MOBILEBERT, student__config__num_hidden_layers=12),
                                     r"student num_hidden_layers=12 but the teacher has 6"),
}


@pytest.fixture
def no_stage_one(tmp_path, monkeypatch):
    """An empty cache, and stage 1 (the teacher's fine-tuning) replaced by a failure: a
    run that gets past its checks fails the case instead of training."""
    from recipes.common import TaskContext

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))

    def started(self, number: int = 1) -> None:
        raise AssertionError("the run got past its checks and started stage 1")

    monkeypatch.setattr(TaskContext, "prepare_teacher", started)
    return tmp_path / "cache"


def _snapshot(folder: Path) -> dict[str, bytes] | bytes | None:
    if folder.is_file():
        return folder.read_bytes()
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", list(CASES))
def test_the_dry_run_refuses_what_the_run_refuses_in_the_same_line(name, tmp_path, capsys,
                                                                   no_stage_one):
    case = CASES[name]
    if case.without_gpu and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    path, run_dir = case.write(tmp_path), case.run_dir(tmp_path)
    argv = ["run", str(path), "--run-dir", str(run_dir), "--no-progress", *case.flags(tmp_path)]
    before = _snapshot(run_dir)
    answers = []
    for dry in (["--dry-run"], []):
        code, err = _run([*argv, *dry], capsys)
        lines = err.splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert re.search(case.phrase, lines[0]), lines[0]
        answers.append(lines[0])
    assert answers[0] == answers[1]
    assert _snapshot(run_dir) == before  # the run refused before writing its folder
    assert not (no_stage_one / "teachers").exists()  # and before any fine-tuning


def _method_files() -> list[Path]:
    files = sorted([*(ROOT / "experiments").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml")])
    return [p for p in files if "method" in yaml.safe_load(p.read_text())]


def _cheap_first(paths: list[Path]) -> list:
    """The smoke files and the examples in the default run; the full experiments' dry
    runs (the same checks on larger settings, about a second each) are ``slow``."""
    return [p if p.parent.name == "examples" or p.stem.endswith("_smoke")
            else pytest.param(p, marks=pytest.mark.slow) for p in paths]


@pytest.mark.parametrize("path", _cheap_first(_method_files()),
                         ids=lambda p: getattr(p, "name", str(p)))
def test_every_shipped_configuration_passes_its_dry_run(path, tmp_path, capsys, monkeypatch):
    """Each experiment and example passes the run's checks (the wall-time estimate, which
    times the teacher, is left out: it is not a check)."""
    import recipes.plan

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(recipes.plan, "teacher_step_seconds", lambda *args: {
        "per_example": 0.0, "seq_len": 0, "threads": 1, "measured_on": "teacher",
        "lengths": [1]})
    code, err = _run(["run", str(path), "--dry-run", "--run-dir", str(tmp_path / "run"),
                      "--no-progress", "--json"], capsys)
    assert code == 0, err
    assert not (tmp_path / "run").exists()


def test_a_latency_limit_without_a_table_is_not_checked_and_not_calibrated(tmp_path, capsys,
                                                                           monkeypatch):
    """The dry run checks a latency limit on this machine's cached table only; without
    one it says so, with the calibration's time bound, and writes no table."""
    import recipes.plan

    cache = tmp_path / "cache"
    monkeypatch.setenv("NAS_CACHE_DIR", str(cache))
    monkeypatch.setattr(recipes.plan, "teacher_step_seconds", lambda *args: {
        "per_example": 0.0, "seq_len": 0, "threads": 1, "measured_on": "teacher",
        "lengths": [1]})
    path = edited(SEARCH, constraints={"max_latency_ms": 1e-6})(tmp_path)
    code, out = main(["run", str(path), "--dry-run", "--run-dir", str(tmp_path / "run"),
                      "--json"]), capsys.readouterr().out
    assert code == 0
    notes = json.loads(out)["checks"]["not_checked"]
    assert len(notes) == 1 and re.fullmatch(
        r"constraints\.max_latency_ms: not checked: no latency table for space 'tiny-cell' "
        r"at 32 tokens on this machine \(calibrating takes up to \d+ s; the run does it "
        r"first\)", notes[0]), notes
    assert not (cache / "latency").exists() or not any((cache / "latency").glob("*.json"))


def test_a_run_folder_a_live_process_holds_is_refused_without_taking_it(tmp_path):
    from nas.rundir import LOCK_FILE, RunLockError, check_run_folder

    run = tmp_path / "run"
    run.mkdir()
    lock = {"pid": os.getppid(), "host": socket.gethostname(), "started": time.time()}
    (run / LOCK_FILE).write_text(json.dumps(lock))
    with pytest.raises(RunLockError, match=f"is in use by process {os.getppid()}"):
        check_run_folder(run, {"name": "x"})
    assert json.loads((run / LOCK_FILE).read_text()) == lock  # left as it was
    other = {**lock, "host": "elsewhere"}
    (run / LOCK_FILE).write_text(json.dumps(other))
    with pytest.raises(RunLockError, match="pass --break-lock"):
        check_run_folder(run, {"name": "x"})
    check_run_folder(run, {"name": "x"}, break_lock=True)  # would be taken over
