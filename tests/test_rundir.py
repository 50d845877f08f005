"""Run directories: one writer per folder, resume rules, damaged run files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nas.checkpoint import CheckpointError, save_state
from nas.errors import NasError
from nas.rundir import LOCK_FILE, RunDir, RunLockError

CONFIG = {"method": "x", "name": "r", "seed": 0}
HOLDER = """
import sys, time
from nas.rundir import RunDir
run = RunDir(sys.argv[1], {"method": "x", "name": "r", "seed": 0})
print("locked", flush=True)
time.sleep(60)
"""


def _lock(run: Path) -> dict:
    return json.loads((run / LOCK_FILE).read_text())


def _write_lock(run: Path, **fields) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / LOCK_FILE).write_text(json.dumps(
        {"host": socket.gethostname(), "started": time.time(), "token": "t", **fields}))


def test_the_lock_names_the_writer_and_goes_with_it(tmp_path):
    with RunDir(tmp_path / "run", CONFIG) as run:
        lock = _lock(run.path)
        assert lock["pid"] == os.getpid() and lock["host"] == socket.gethostname()
        assert lock["started"] <= time.time()
        again = RunDir(tmp_path / "run", CONFIG, resume=True)  # one process, one writer
        again.close()
        assert (run.path / LOCK_FILE).is_file()  # still held by the first handle
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    assert [r["stage"] for r in RunDir(tmp_path / "run").read_log()] == ["start", "start"]


def test_a_second_process_is_refused_until_the_first_is_gone(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)],  # noqa: S603 (test)
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockError) as err:
            RunDir(run, CONFIG, resume=True)
        assert str(err.value) == (f"{run} is in use by process {holder.pid} on "
                                  f"{socket.gethostname()}; wait for it or stop it")
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean-up: the lock stays behind
        holder.wait()
    assert _lock(run)["pid"] == holder.pid
    with pytest.warns(UserWarning, match=f"stale lock of process {holder.pid} .* taken over"):
        taken = RunDir(run, CONFIG, resume=True)
    assert _lock(run)["pid"] == os.getpid()
    taken.close()


def test_a_reused_pid_does_not_keep_a_lock_alive(tmp_path):
    # the pid is alive (this very test's parent), but that process started after the lock
    _write_lock(tmp_path / "run", pid=os.getppid(), started=1.0)
    with pytest.warns(UserWarning, match="stale lock"), RunDir(tmp_path / "run", CONFIG):
        assert _lock(tmp_path / "run")["pid"] == os.getpid()


def test_a_lock_from_another_host_needs_break_lock(tmp_path):
    _write_lock(tmp_path / "run", pid=123, host="elsewhere")
    with pytest.raises(RunLockError, match="locked by process 123 on elsewhere, .* pass "
                                           "--break-lock"):
        RunDir(tmp_path / "run", CONFIG)
    with pytest.warns(UserWarning, match="broken \\(--break-lock\\)"), \
            RunDir(tmp_path / "run", CONFIG, break_lock=True):
        assert _lock(tmp_path / "run")["pid"] == os.getpid()


def test_an_unreadable_lock_is_taken_over(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_FILE).write_text('{"pid": 12')
    with pytest.warns(UserWarning, match="unreadable lock file"), RunDir(tmp_path / "run",
                                                                          CONFIG):
        pass


@pytest.mark.parametrize("make", ["missing", "empty", "no snapshot"])
def test_resume_needs_a_run(tmp_path, make):
    run = tmp_path / "run"
    if make != "missing":
        run.mkdir()
    if make == "no snapshot":
        (run / "notes.txt").write_text("x")
    with pytest.raises(NasError) as err:
        RunDir(run, CONFIG, resume=True)
    assert str(err.value) == f"{run} holds no run to resume; drop --resume to start one"
    assert run.exists() == (make != "missing")  # nothing was created


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_that_finished_no_stage_can_start_again(tmp_path, resume):
    RunDir(tmp_path / "run", {**CONFIG, "task": "sst3"}).close()  # failed in stage 1
    fixed = {**CONFIG, "task": "sst2"}
    with RunDir(tmp_path / "run", fixed, resume=resume) as run:
        assert run.config == fixed
        run.log("teacher", metrics={})  # a stage finished: the run is now worth keeping
    with pytest.raises(NasError, match="already holds a run; pass --resume"):
        RunDir(tmp_path / "run", fixed)
    with pytest.raises(NasError, match="configuration differs"):
        RunDir(tmp_path / "run", {**fixed, "seed": 1}, resume=True)
    RunDir(tmp_path / "run", fixed, resume=True).close()


def test_result_files_and_checkpoints_count_as_finished_stages(tmp_path):
    with RunDir(tmp_path / "run", CONFIG) as run:
        assert not run.finished_any_stage()
        save_state(run.checkpoint_path(), {"step": 1})
        assert run.finished_any_stage()
    with pytest.raises(NasError, match="already holds a run"):
        RunDir(tmp_path / "run", {**CONFIG, "seed": 3})


def test_resume_refuses_damaged_checkpoints_before_any_stage(tmp_path):
    import torch

    with RunDir(tmp_path / "run", CONFIG) as run:
        path = run.checkpoint_path()
        save_state(path, {"w": torch.ones(100)})
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(CheckpointError, match="not a readable checkpoint .*truncated"):
        RunDir(tmp_path / "run", CONFIG, resume=True)
    assert not (tmp_path / "run" / LOCK_FILE).exists()  # a refused open keeps no lock


def test_a_cut_off_log_line_is_skipped_and_the_log_goes_on(tmp_path):
    with RunDir(tmp_path / "run", CONFIG) as run:
        run.log("search_epoch", epoch=1)
        with open(run.path / "log.jsonl", "a") as f:
            f.write('{"time": 1.0, "stage": "search_ep')  # killed mid-line
        with pytest.warns(UserWarning, match=r"log.jsonl:3: cut-off line skipped"):
            assert [r["stage"] for r in run.read_log()] == ["start", "search_epoch"]
        run.log("search_epoch", epoch=2)  # starts on a line of its own
        with pytest.warns(UserWarning, match="cut-off line"):
            assert [r["epoch"] for r in run.read_log("search_epoch")] == [1, 2]
        (run.path / "log.jsonl").write_text('{"stage": "a"}\n{"stage": b}\n')
        with pytest.raises(NasError, match=r"log.jsonl:2: not a JSON object"):
            run.read_log()


def test_a_damaged_result_file_is_named(tmp_path):
    with RunDir(tmp_path / "run", CONFIG) as run:
        (run.path / "metrics.json").write_text('{"teacher": {"dev": ')
        with pytest.raises(NasError, match=r"metrics.json: broken JSON at line 1 column 21"):
            run.load_json("metrics.json")
        (run.path / "metrics.json").write_bytes(b'{"a": "\xff"}')
        with pytest.raises(NasError, match=r"metrics.json: not UTF-8 text"):
            run.load_json("metrics.json")


def test_named_writers_share_a_folder_but_not_a_name(tmp_path):
    run = tmp_path / "run"
    RunDir(run, CONFIG).close()
    sleeper = subprocess.Popen(["sleep", "30"])  # noqa: S607 (a stand-in live process)
    try:
        _write_lock(run, pid=sleeper.pid, started=time.time() + 1)
        os.replace(run / LOCK_FILE, run / (LOCK_FILE + "-random1"))  # sample 1 is running
        with pytest.raises(RunLockError, match="in use by process"):
            RunDir(run, CONFIG, resume=True, writer="random1")
        with RunDir(run, CONFIG, resume=True, writer="random0") as other:
            assert (other.path / ".lock-random0").is_file()
        assert not (run / ".lock-random0").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.raises(ValueError, match="writer must be"):
        RunDir(run, CONFIG, resume=True, writer="../x")


@pytest.mark.parametrize("fields", [{"pid": 2**70}, {"pid": "abc"}, {"pid": -3},
                                    {"pid": os.getpid(), "started": "yesterday"}])
def test_odd_lock_contents_count_as_stale(tmp_path, fields):
    _write_lock(tmp_path / "run", **fields)
    with pytest.warns(UserWarning, match="stale lock"), RunDir(tmp_path / "run", CONFIG):
        assert _lock(tmp_path / "run")["pid"] == os.getpid()
