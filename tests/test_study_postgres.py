"""A study on a real PostgreSQL server: a throw-away cluster (initdb, pg_ctl from the
image's PostgreSQL 15) on a free port, removed afterwards. Two worker processes share
the study through ``postgresql+psycopg://``, a second run attaches to it, and a silent
trial of another host is failed by Optuna's heartbeat and retried."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

PG_BIN = Path("/usr/lib/postgresql/15/bin")

pytestmark = pytest.mark.skipif(not (PG_BIN / "initdb").is_file(),
                                reason=f"no PostgreSQL binaries in {PG_BIN}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL cluster for this module: ``postgresql+psycopg://…`` URL."""
    pytest.importorskip("psycopg", reason="pip install 'psycopg[binary]' for PostgreSQL")
    # PostgreSQL refuses to run as root: run it as the image's postgres user then
    as_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="nas-pg-"))
    if as_user:
        shutil.chown(root, "postgres")
    data, port = root / "data", _free_port()

    def pg(*args: str) -> None:
        subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=60)

    try:
        pg(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
           "--no-sync")
        pg(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-o",
           f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m",
                        "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def test_an_attached_run_shares_a_postgres_study(postgres, tmp_path):
    from test_study_loop import Synthetic, space, spec_for

    from searchers.loop import StudyOptions, StudySettings, StudySpec, evaluations, run_study

    s = space()
    spec = spec_for(tmp_path / "a", searcher="tpe", storage=postgres, n_trials=4)
    study = run_study(spec, s, Synthetic(s))
    assert evaluations(study) == 4
    attached = StudySpec.for_run(
        searcher="tpe", name="t", run_dir=tmp_path / "b", seed=0,
        settings=StudySettings(samplers={"tpe": {"n_startup_trials": 3}}),
        options=StudyOptions(storage=postgres, attach=True, n_trials=6), default_trials=3)
    study = run_study(attached, s, Synthetic(s))
    assert evaluations(study) == 6
    assert len(list((tmp_path / "b").glob("trials/*/result.json"))) == 2
    numbers = [t.number for t in study.trials]
    assert numbers == list(range(len(numbers)))  # no clashes, no gaps


def test_heartbeat_on_postgres_fails_and_retries_a_silent_trial(postgres, tmp_path):
    from test_study_loop import Synthetic, space, spec_for

    from searchers.loop import open_search
    from searchers.storage import recover_stale_trials

    s = space()
    spec = spec_for(tmp_path, searcher="random", storage=postgres, heartbeat_interval=1,
                    grace_period=2, seeds=[])
    spec.study_name = "heartbeat"
    search = open_search(spec, s, Synthetic(s).objectives)
    candidate = search.ask()
    number = candidate.id
    search.set_trial_attr(candidate, "worker", {"host": "elsewhere", "pid": 1,
                                                "started": 0.0})
    search.study._storage.record_heartbeat(search.study.trials[number]._trial_id)
    time.sleep(3.2)
    assert recover_stale_trials(search.study, retries=1) == [number]
    retry = search.study.trials[-1]
    assert retry.state.name == "WAITING" and retry.params == search.study.trials[number].params
