"""Same config and seed, same result: with a cold or a warm cache, and after a kill at
any stage followed by ``--resume`` (the reliability issue's item 1).

Slow (three smoke runs): ``python -m pytest -m slow tests/test_determinism.py``. In the
default run, tests/test_smokes.py requires every method's smoke run, in the test run's
shared (partly warm) cache, to give the results recorded from an empty cache, and
tests/test_lanas_smoke.py a stopped and continued search to give its straight run's; the
warm-cache and search-resume cases of AdaBERT are in test_adabert_e2e.py (slow too).
"""

from __future__ import annotations

import hashlib
import json

import pytest

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
