"""Same config and seed, same result: with a cold or a warm cache, and after a kill at
any stage followed by ``--resume`` (the reliability issue's item 1); and after ``kill -9``
of each method's smoke run in the middle of a training stage (the reliability issue's item 2).

Slow (smoke runs): ``python -m pytest -m slow tests/test_determinism.py``. In the
default run, tests/test_smokes.py requires every method's smoke run, in the test run's
shared (partly warm) cache, to give the results recorded from an empty cache, and
tests/test_lanas_smoke.py a stopped and continued search to give its straight run's; the
warm-cache and search-resume cases of AdaBERT are in test_adabert_e2e.py (slow too).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest
from smokes import ROOT, lookup, read_expected, smoke_file

from nas.cli import main

SMOKE = "experiments/adabert_smoke.yaml"
pytestmark = pytest.mark.slow


def _fingerprint(run_dir) -> dict[str, str]:
    """Hashes of what each stage produced: teacher weights, derived architecture, the
    retrained weights, the export."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    teacher = metrics["teacher"]["model_dir"]
    digest = (lambda path: hashlib.sha256(path.read_bytes()).hexdigest())
    from pathlib import Path

    return {"teacher": digest(Path(teacher) / "model.safetensors"),
            "derived": json.loads((run_dir / "derived_arch.json").read_text())["id"],
            "export": digest(run_dir / "export" / "model.safetensors")}


@pytest.mark.parametrize("stage", ["teacher", "search", "retrain"])
def test_kill_at_any_stage_then_resume_gives_the_same_result(stage, tmp_path, monkeypatch):
    import nas.teacher
    import nas.train

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache_a"))
    assert main(["run", SMOKE, "--no-progress", "--run-dir", str(tmp_path / "a")]) == 0
    expected = _fingerprint(tmp_path / "a")

    # a second, cold cache: the run is killed inside `stage` after its first checkpoint
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache_b"))
    real_finetune = nas.teacher.finetune_teacher
    monkeypatch.setattr(nas.teacher, "finetune_teacher",
                        lambda *a, **k: real_finetune(*a, **{**k, "checkpoint_every": 3}))
    real_save, saves = nas.train.Trainer._save, {"n": 0}
    desc = {"teacher": "finetune", "search": "search", "retrain": "retrain"}[stage]

    def dying_save(self, epoch, batch):
        real_save(self, epoch, batch)
        if self.desc.startswith(desc) and 0 < self.step < self.total_steps:
            saves["n"] += 1
            raise KeyboardInterrupt

    monkeypatch.setattr(nas.train.Trainer, "_save", dying_save)
    assert main(["run", SMOKE, "--no-progress", "--run-dir", str(tmp_path / "b")]) == 130
    assert saves["n"] == 1, f"the run never checkpointed inside the {stage} stage"
    monkeypatch.setattr(nas.train.Trainer, "_save", real_save)
    assert main(["run", SMOKE, "--no-progress", "--run-dir", str(tmp_path / "b"),
                 "--resume"]) == 0
    assert _fingerprint(tmp_path / "b") == expected


#: Per method, the training stage (the loop's description, ``nas.train.Trainer.desc``) in
#: which the smoke run is killed: one late in the method's pipeline, so the resumed run
#: must also take up what the stages before it finished. Each stage checkpoints before its
#: last step in the smoke file (its ``checkpoint_every``); mixedvocab's stage II is a
#: cached step, whose checkpoint lies in the cache entry it is building.
KILL_IN = {"adabert": "search", "tinybert": "prediction", "mobilebert": "transfer layer3",
           "mixedvocab": "stage II", "efficientbert": "stage 3 supernet"}

#: ``python -c`` of a smoke run that ends itself with SIGKILL right after its first
#: checkpoint inside the stage named by argv[1] (the smoke stages take under a second, too
#: short to hit by a kill from outside): no clean-up, no exception, the lock left behind.
_DIE_AFTER_CHECKPOINT = """
import os, signal, sys
import nas.train
real_save = nas.train.Trainer._save
def save_then_die(self, epoch, batch):
    real_save(self, epoch, batch)
    if (self.checkpoint is not None and self.desc.startswith(sys.argv[1])
            and 0 < self.step < self.total_steps):
        os.kill(os.getpid(), signal.SIGKILL)
nas.train.Trainer._save = save_then_die
from nas.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("method", sorted(KILL_IN))
def test_smoke_killed_mid_stage_resumes_to_its_recorded_metrics(method, tmp_path):
    """``kill -9`` of the method's smoke run (its own process, one torch thread as the
    recording, an empty cache) after a checkpoint inside :data:`KILL_IN`'s stage, then
    ``--resume``: the run takes up that checkpoint and ends with the metrics recorded in
    the smoke file's ``# expected:`` block (those of an uninterrupted run)."""
    env = {**os.environ, "NAS_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    argv = ["run", str(smoke_file(method)), "--no-progress", "--run-dir", str(tmp_path / "run")]

    def nas(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=900)

    killed = nas("-c", _DIE_AFTER_CHECKPOINT, KILL_IN[method], *argv)
    assert killed.returncode == -signal.SIGKILL, (
        f"not killed inside {KILL_IN[method]!r} (exit {killed.returncode}):\n"
        + killed.stderr[-2000:])
    resumed = nas("-m", "nas.cli", *argv, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr  # the stage went on from its checkpoint
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    expected = read_expected(smoke_file(method))
    assert expected, f"{smoke_file(method).name} records no expected metrics"
    assert {key: lookup(metrics, key) for key in expected} == expected


def test_two_identical_runs_write_identical_files(tmp_path):
    """Two runs of the cheapest smoke file, each in its own process and cold cache, write
    the same bytes: the fine-tuned teacher's weights and tokenizer, and every file of the
    export but the model card (which records measured latency); the SHA-256s that the
    export's ``config.json`` lists are the files'."""
    runs = []
    for name in ("a", "b"):
        env = {**os.environ, "NAS_CACHE_DIR": str(tmp_path / f"cache_{name}"),
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, "-m", "nas.cli", "run",
                               str(smoke_file("tinybert")), "--no-progress", "--run-dir",
                               str(tmp_path / name)], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(tmp_path / name)
    from pathlib import Path

    def files(run_dir) -> dict[str, bytes]:
        teacher = Path(json.loads((run_dir / "metrics.json").read_text())["teacher"]["model_dir"])
        found = {f"teacher/{p.name}": p.read_bytes() for p in teacher.iterdir() if p.is_file()}
        found.update({f"export/{p.name}": p.read_bytes()
                      for p in (run_dir / "export").iterdir()
                      if p.is_file() and p.name != "README.md"})
        return found

    a, b = files(runs[0]), files(runs[1])
    assert {"teacher/model.safetensors", "teacher/tokenizer.json", "export/model.safetensors",
            "export/tokenizer.json", "export/tokenizer_config.json", "export/config.json"} <= set(a)
    assert sorted(a) == sorted(b)
    assert [n for n in a if a[n] != b[n]] == []
    listed = json.loads(a["export/config.json"])
    listed = listed.get("files") or listed["nas_files"]
    assert listed and all(entry["sha256"] == hashlib.sha256(a[f"export/{n}"]).hexdigest()
                          for n, entry in listed.items())
