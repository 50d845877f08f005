"""Teacher loading, fine-tuning, the fine-tune cache and resuming."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import nas.teacher
from nas.cli import teacher as cli_teacher
from nas.teacher import (
    DEFAULT_TEACHER,
    FinetuneConfig,
    TeacherError,
    classification_metrics,
    finetune_teacher,
    load_teacher,
    resolve_teacher,
    teacher_identity,
)

TINY = FinetuneConfig(epochs=1, batch_size=8, max_seq_len=32, max_train_examples=16, lr=1e-3)


def test_default_teacher_is_the_packaged_minilm() -> None:
    path = Path(resolve_teacher(None))
    assert (path / "config.json").is_file() and (path / "vocab.txt").is_file()
    assert resolve_teacher(DEFAULT_TEACHER) == resolve_teacher("minilm") == str(path)
    config = json.loads((path / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == (6, 384)


def test_resolve_teacher_errors(tmp_path: Path) -> None:
    with pytest.raises(TeacherError, match="does not exist"):
        resolve_teacher(str(tmp_path / "missing"))
    with pytest.raises(TeacherError, match="no config.json"):
        resolve_teacher(str(tmp_path))
    with pytest.raises(TeacherError, match="offline"):
        load_teacher("no-such-org/no-such-model")


def test_teacher_identity_tells_models_apart(tiny_teacher: Path,
                                             tiny_mlm_teacher: Path) -> None:
    a = teacher_identity(str(tiny_teacher))
    assert a == teacher_identity(str(tiny_teacher))
    assert a != teacher_identity(str(tiny_mlm_teacher)) != teacher_identity(None)


def test_metrics_by_hand() -> None:
    # preds 1,1,0,0 vs labels 1,0,1,0: acc 1/2; tp 1, fp 1, fn 1 → F1 = 2/(2+1+1) = 1/2
    m = classification_metrics([1, 1, 0, 0], [1, 0, 1, 0], "accuracy+f1")
    assert m == {"accuracy": 0.5, "f1": 0.5}
    assert classification_metrics([0, 0], [0, 1], "accuracy") == {"accuracy": 0.5}


def test_finetune_caches_and_exports(tiny_teacher: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "model"
    res = finetune_teacher("mrpc", str(tiny_teacher), out_dir=out, config=TINY,
                           cache_dir=tmp_path / "cache", progress=False)
    assert not res.from_cache and res.steps == 2 and res.train_examples == 16
    assert set(res.metrics) == {"accuracy", "f1"} and res.dev_examples == 408
    assert (out / "config.json").is_file() and (out / "result.json").is_file()
    # the exported model is a classifier usable as a teacher
    assert load_teacher(str(out), num_labels=2).config.num_labels == 2

    # asking again: no model load, no torch work, well under 5 s
    def blocked(*args: object, **kwargs: object) -> None:
        raise AssertionError("model loaded on a cache hit")

    monkeypatch.setattr(nas.teacher, "load_teacher", blocked)
    t0 = time.perf_counter()
    again = finetune_teacher("mrpc", str(tiny_teacher), out_dir=tmp_path / "other", config=TINY,
                             cache_dir=tmp_path / "cache", progress=False)
    assert time.perf_counter() - t0 < 5.0
    assert again.from_cache and again.metrics == res.metrics and again.key == res.key
    assert (tmp_path / "other" / "model.safetensors").is_file()
    # any changed hyperparameter is another cache entry
    changed = FinetuneConfig(**{**TINY.__dict__, "seed": 1})
    with pytest.raises(AssertionError, match="model loaded"):
        finetune_teacher("mrpc", str(tiny_teacher), config=changed,
                         cache_dir=tmp_path / "cache", progress=False)


def test_interrupted_finetune_resumes_without_losing_steps(
    tiny_teacher: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    real_evaluate = nas.teacher.evaluate

    def crash_once(*args: object, **kwargs: object) -> dict:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # killed after training, before the dev evaluation
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(nas.teacher, "evaluate", crash_once)
    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        finetune_teacher("mrpc", str(tiny_teacher), config=TINY, cache_dir=cache,
                         checkpoint_every=1, progress=False)
    (run_dir,) = (cache / "teachers").iterdir()
    ckpt = run_dir / "checkpoint.safetensors"
    assert ckpt.is_file() and not (run_dir / "result.json").exists()
    res = finetune_teacher("mrpc", str(tiny_teacher), config=TINY, cache_dir=cache,
                           checkpoint_every=1, progress=False)
    assert res.steps == 2 and "accuracy" in res.metrics and len(res.history) == 1
    assert not ckpt.exists() and (run_dir / "result.json").is_file()


def test_finetune_resumes_bit_identically_inside_an_epoch(
    tiny_teacher: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed in the second epoch after a checkpoint inside it (dropout on, shuffled data):
    the resumed run ends with the very weights and history of an unbroken one."""
    import torch
    from safetensors.torch import load_file

    import nas.data

    config = FinetuneConfig(epochs=2, batch_size=8, max_seq_len=32, max_train_examples=24,
                            lr=1e-3)  # 3 steps per epoch; checkpoints at steps 2, 3, 4, 6

    def finetune(cache: Path) -> nas.teacher.FinetuneResult:
        return finetune_teacher("mrpc", str(tiny_teacher), config=config, cache_dir=cache,
                                checkpoint_every=2, progress=False)

    straight = finetune(tmp_path / "straight")
    real_iter, served = nas.data.iter_batches, {"n": 0}

    def dying_iter(*args: object, **kwargs: object):
        for batch in real_iter(*args, **kwargs):
            if kwargs.get("shuffle"):  # a training batch, not a dev one
                served["n"] += 1
                if served["n"] == 6:  # epoch 2, batch 3: the last checkpoint is at step 4
                    raise KeyboardInterrupt
            yield batch

    monkeypatch.setattr(nas.data, "iter_batches", dying_iter)
    with pytest.raises(KeyboardInterrupt):
        finetune(tmp_path / "killed")
    monkeypatch.setattr(nas.data, "iter_batches", real_iter)
    (run_dir,) = (tmp_path / "killed" / "teachers").iterdir()
    from nas.checkpoint import load_state

    assert load_state(run_dir / "checkpoint.safetensors")["position"] == {
        "epoch": 1, "batch": 1, "step": 4}
    resumed = finetune(tmp_path / "killed")
    assert resumed.history == straight.history and resumed.steps == straight.steps == 6
    want = load_file(str(Path(straight.model_dir) / "model.safetensors"))
    got = load_file(str(Path(resumed.model_dir) / "model.safetensors"))
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_cli_finetune_json_and_errors(tiny_teacher: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    args = ["finetune", "--task", "mrpc", "--teacher", str(tiny_teacher), "--epochs", "1",
            "--batch-size", "8", "--max-seq-len", "32", "--max-train-examples", "8",
            "--cache-dir", str(tmp_path), "--no-progress"]
    assert cli_teacher.main([*args, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["task"] == "mrpc" and not first["from_cache"]
    assert cli_teacher.main(args) == 0
    assert "(cached)" in capsys.readouterr().out
    assert cli_teacher.main(["finetune", "--task", "sst2", "--epochs", "0"]) == 2
    assert "epochs" in capsys.readouterr().err


def test_cli_probes_reports_per_layer_accuracy(tiny_teacher: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    args = ["probes", "--task", "sst2", "--teacher", str(tiny_teacher), "--max-seq-len", "32",
            "--max-train-examples", "48", "--max-dev-examples", "16",
            "--cache-dir", str(tmp_path), "--json"]
    assert cli_teacher.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["probes"] == 3 and len(out["dev_accuracy"]) == 3
    assert all(0.0 <= a <= 1.0 for a in out["train_accuracy"])


EXPERIMENT_DIR = Path(__file__).resolve().parents[1] / "experiments"
EXPERIMENTS = sorted(
    [*EXPERIMENT_DIR.glob("teacher_*.yaml"), *EXPERIMENT_DIR.glob("probes_*.yaml")]
)


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_teacher_experiment_files_parse_and_match_the_cli(path: Path) -> None:
    import argparse
    import shlex

    import yaml

    header = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
    for key in ("command:", "run time:", "result:"):
        assert any(key in ln for ln in header), f"{path.name}: header lacks {key!r}"
    exp = yaml.safe_load(path.read_text())
    assert set(exp) >= {"task", "teacher", "command", "result"}
    # the recorded command parses with the CLI
    parser = argparse.ArgumentParser(prog="nas")
    cli_teacher.register(parser.add_subparsers(dest="command"))
    argv = shlex.split(exp["command"])
    assert argv[:2] == ["nas", "teacher"] and argv[2] in ("finetune", "probes")
    args = parser.parse_args(argv[1:])
    assert args.task == exp["task"]
    if argv[2] == "finetune":
        config = FinetuneConfig(**exp["config"])  # every recorded hyperparameter is real
        assert (args.epochs, args.lr, args.batch_size, args.max_seq_len) == (
            config.epochs, config.lr, config.batch_size, config.max_seq_len)
        assert 0.0 < exp["result"]["dev_accuracy"] <= 1.0
    else:
        assert len(exp["result"]["dev_accuracy"]) == len(exp["result"]["train_accuracy"])


class _Payload:
    """Unpickling this creates ``marker``: proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def test_a_pickle_planted_in_the_teacher_cache_never_runs(tiny_teacher: Path,
                                                          tmp_path: Path) -> None:
    import pickle

    from nas.checkpoint import CheckpointError

    done = finetune_teacher("mrpc", str(tiny_teacher), config=TINY,
                            cache_dir=tmp_path / "cache", progress=False)
    run_dir = Path(done.model_dir).parent
    (run_dir / "result.json").unlink()  # as if the fine-tune had been interrupted
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"model": _Payload(marker)})  # noqa: S301 (the attack under test)
    (run_dir / "checkpoint.safetensors").write_bytes(payload)
    with pytest.raises(CheckpointError, match=r"checkpoint\.safetensors") as err:
        finetune_teacher("mrpc", str(tiny_teacher), config=TINY,
                         cache_dir=tmp_path / "cache", progress=False)
    assert "\n" not in str(err.value)
    (run_dir / "checkpoint.safetensors").unlink()
    again = finetune_teacher("mrpc", str(tiny_teacher), config=TINY,
                             cache_dir=tmp_path / "cache", progress=False)
    assert again.metrics == done.metrics
    assert not marker.exists()


def test_two_fine_tunes_of_the_same_settings_train_once(
    tiny_teacher: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    """Two callers of one setting (threads here: the lock is per open file, so a thread
    contends like a process): the first trains under the entry's lock, the second waits
    for it and reads the result from the cache."""
    import logging
    import threading
    from concurrent.futures import ThreadPoolExecutor

    started, waiting = threading.Event(), threading.Event()
    trained: list[str] = []
    real_train = nas.teacher._train

    class SeesTheWait(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("waiting for another process"):
                waiting.set()

    def train_once_the_other_waits(*args: Any, **kwargs: Any) -> Any:
        trained.append(threading.current_thread().name)
        started.set()
        waiting.wait(timeout=30)  # without the lock the other never waits: it trains too
        return real_train(*args, **kwargs)

    cache_log = logging.getLogger("nas.cache")
    handler = SeesTheWait()
    cache_log.addHandler(handler)
    caplog.set_level(logging.INFO, logger="nas.cache")
    monkeypatch.setattr(nas.teacher, "_train", train_once_the_other_waits)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(finetune_teacher, "mrpc", str(tiny_teacher), config=TINY,
                                cache_dir=tmp_path / "cache", progress=False)
            assert started.wait(timeout=30)
            second = pool.submit(finetune_teacher, "mrpc", str(tiny_teacher), config=TINY,
                                 cache_dir=tmp_path / "cache", progress=False)
            a, b = first.result(timeout=60), second.result(timeout=60)
    finally:
        cache_log.removeHandler(handler)
    assert len(trained) == 1 and waiting.is_set()
    assert not a.from_cache and b.from_cache
    assert (b.key, b.metrics, b.steps) == (a.key, a.metrics, a.steps)
