"""AdaBERT end to end on the smoke configuration: the pipeline, the report, and resume.

The smoke run fine-tunes the packaged teacher on 256 SST-2 examples (cached in a
temporary folder for this module), searches for one short epoch and retrains.
"""

from __future__ import annotations

import json

import pytest

from nas.errors import NasError
from recipes.adabert import AdaBertRun, load_config, run_adabert

SMOKE = "experiments/adabert_smoke.yaml"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("NAS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def test_smoke_pipeline_and_report(cache, tmp_path):
    from nas.report import write_report

    config = load_config(SMOKE)
    metrics = run_adabert(config, tmp_path / "run", progress=False)
    teacher, searched = metrics["teacher"], metrics["searched"]
    assert 0.0 <= searched["dev"]["accuracy"] <= 1.0
    assert searched["params"] < teacher["params"] / 4
    derived = json.loads((tmp_path / "run" / "derived_arch.json").read_text())
    assert derived["choices"] == searched["arch"]
    exported = (tmp_path / "run" / "export" / "config.json").read_text()
    assert all(f'"{name}"' in exported for name in searched["arch"])
    epochs = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text()
              .splitlines() if '"search_epoch"' in line]
    assert len(epochs) == 1 and {"loss", "tau", "entropy", "argmax", "probs"} <= set(epochs[0])

    # one process per random sample: sample 1 alone, then the rest
    one = run_adabert(config, tmp_path / "run", searcher="random", resume=True,
                      progress=False, random_sample=1)
    assert [r["tag"] for r in one["random"]["runs"]] == ["random1"]
    assert not (tmp_path / "run" / "random_0.json").exists()
    with pytest.raises(NasError, match="--random-sample 2"):
        run_adabert(config, tmp_path / "run", searcher="random", resume=True,
                    progress=False, random_sample=2)
    random_metrics = run_adabert(config, tmp_path / "run", searcher="random", resume=True,
                                 progress=False)
    assert len(random_metrics["random"]["runs"]) == config.random_samples
    assert random_metrics["random"]["runs"][1] == one["random"]["runs"][0]  # kept, not redone
    assert "searched" in random_metrics  # the earlier stage's results are kept
    text, data = write_report(tmp_path / "run")
    assert "| searched |" in text and "random baseline:" in text
    assert all((tmp_path / "run" / name).stat().st_size > 5000
               for name in ("arch_distribution.png", "derived_cell.png"))


def test_interrupted_search_resumes_to_the_same_architecture(cache, tmp_path, monkeypatch):
    from searchers.differentiable import DifferentiableSearch

    config = load_config(SMOKE)
    straight = AdaBertRun(config, tmp_path / "straight", progress=False)
    straight.prepare()
    expected = straight.search()

    real_step = DifferentiableSearch.step
    calls = {"n": 0}

    def dying_step(self, train_batch, val_batch):
        calls["n"] += 1
        if calls["n"] == 5:  # after the checkpoint of step 3
            raise KeyboardInterrupt
        return real_step(self, train_batch, val_batch)

    monkeypatch.setattr(DifferentiableSearch, "step", dying_step)
    killed = AdaBertRun(config, tmp_path / "killed", progress=False)
    killed.prepare()
    with pytest.raises(KeyboardInterrupt):
        killed.search()
    monkeypatch.setattr(DifferentiableSearch, "step", real_step)
    assert killed.run.load_checkpoint()["search"]["step"] == 3

    with pytest.raises(ValueError, match="--resume"):
        AdaBertRun(config, tmp_path / "killed", progress=False)
    resumed = AdaBertRun(config, tmp_path / "killed", resume=True, progress=False)
    resumed.prepare()
    assert resumed.search() == expected


def test_interrupted_retrain_resumes_at_its_last_epoch(cache, tmp_path, monkeypatch):
    import dataclasses

    import torch

    import recipes.adabert as recipe

    config = load_config(SMOKE)
    config = dataclasses.replace(config, retrain=dataclasses.replace(config.retrain, epochs=2))
    straight = AdaBertRun(config, tmp_path / "straight", progress=False)
    straight.prepare()
    arch = straight.space.validate(straight.space.default())
    expected_model, expected = straight.retrain(arch, "fixed")
    assert not (tmp_path / "straight" / "retrain_fixed.pt").exists()  # removed when done

    real_loss, calls = recipe._loss, {"n": 0}
    per_epoch = -(-len(straight.train) // config.retrain.batch_size)

    def dying_loss(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == per_epoch + 2:  # inside the second epoch
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(recipe, "_loss", dying_loss)
    killed = AdaBertRun(config, tmp_path / "killed", progress=False)
    killed.prepare()
    with pytest.raises(KeyboardInterrupt):
        killed.retrain(arch, "fixed")
    monkeypatch.setattr(recipe, "_loss", real_loss)
    assert killed.run.load_checkpoint("retrain_fixed.pt")["epoch"] == 1

    resumed = AdaBertRun(config, tmp_path / "killed", resume=True, progress=False)
    resumed.prepare()
    model, result = resumed.retrain(arch, "fixed")
    assert result["dev"] == expected["dev"]
    resumed_state = model.state_dict()
    for name, value in expected_model.state_dict().items():
        assert torch.equal(value, resumed_state[name]), name
