"""The test run's smoke runs (``tests/conftest.py``): under pytest-xdist the workers share
one run of each smoke experiment, made by the first worker that asks while the other
waits, and each worker gets a copy of its own to add to. Two ``SmokeRuns`` of one shared
folder stand for the two workers (threads: the lock is per open file, so a thread
contends like a process); the ``nas run`` itself is replaced by a stand-in."""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import conftest
import pytest
from conftest import SmokeRuns


class Temp:
    """A worker's own temporary folders (what ``tmp_path_factory.mktemp`` gives)."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def mktemp(self, name: str) -> Path:
        path = self.base / f"{name}0"
        path.mkdir(parents=True)
        return path


def test_two_workers_share_one_smoke_run_and_get_copies_of_their_own(
        tmp_path, monkeypatch, caplog):
    started, waiting = threading.Event(), threading.Event()
    runs: list[Path] = []

    class SeesTheWait(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("waiting for another process"):
                waiting.set()

    def run_once_the_other_waits(path: Path, run_dir: Path) -> int:
        runs.append(run_dir)
        started.set()
        waiting.wait(timeout=30)  # without the lock the other never waits: it runs too
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.json").write_text(json.dumps({"searched": {"params": 7}}))
        (run_dir / "log.jsonl").write_text("{}\n")
        return 0

    monkeypatch.setattr(conftest, "_run_smoke", run_once_the_other_waits)
    caplog.set_level(logging.INFO, logger="nas.cache")
    handler = SeesTheWait()
    logging.getLogger("nas.cache").addHandler(handler)
    shared = tmp_path / "shared"
    workers = [SmokeRuns(Temp(tmp_path / f"gw{i}"), shared) for i in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(workers[0], "search")
            assert started.wait(timeout=30)
            second = pool.submit(workers[1], "search")
            dirs = [first.result(timeout=60), second.result(timeout=60)]
    finally:
        logging.getLogger("nas.cache").removeHandler(handler)
    assert runs == [shared / "smokes" / "search" / "run"] and waiting.is_set()
    assert dirs == [tmp_path / f"gw{i}" / "search_smoke0" / "run" for i in range(2)]
    assert workers[1]("search") == dirs[1]  # asked again: the same copy, no other run
    # a worker adds to its copy (a resume appends to the log): the other's is untouched,
    # and metrics() stays what the smoke run wrote
    with (dirs[0] / "log.jsonl").open("a") as log:
        log.write('{"resumed": true}\n')
    (dirs[0] / "metrics.json").write_text("{}")
    assert (dirs[1] / "log.jsonl").read_text() == "{}\n"
    assert [w.metrics("search") for w in workers] == [{"searched": {"params": 7}}] * 2


def test_a_failed_smoke_run_fails_the_other_worker_without_running_again(tmp_path,
                                                                         monkeypatch):
    runs: list[Path] = []

    def fails(path: Path, run_dir: Path) -> int:
        runs.append(run_dir)
        return 3

    monkeypatch.setattr(conftest, "_run_smoke", fails)
    shared = tmp_path / "shared"
    for i in range(2):
        worker = SmokeRuns(Temp(tmp_path / f"gw{i}"), shared)
        with pytest.raises(pytest.fail.Exception,
                           match="nas run search_smoke.yaml ended with status 3"):
            worker("search")
    assert len(runs) == 1
