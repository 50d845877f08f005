"""Outputs and inputs are checked before work starts (0aa243d).

Every ``-o``/``--output`` of the command line (a file in the way, a folder in the way, an
existing file, a missing parent), a missing ``--run`` folder, and a ``--storage`` file or
URL are refused in one ``error:`` line naming the path and the fix, *before* any
training, augmentation or stage 1: the work each command would do is replaced by a
function that fails the test if it is reached. ``nas cache list|clear`` are tested on a
cache folder written by hand.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path

import pytest

from nas.cli import main
from nas.cli.common import check_output
from nas.errors import NasError

ROOT = Path(__file__).resolve().parents[1]
LANAS_SMOKE = ROOT / "experiments" / "lanas_smoke.yaml"


class WorkStarted(Exception):
    """Raised by the stand-in of a command's work: the checks let the command through."""


def _work_started(*args, **kwargs):
    raise WorkStarted("the work started")


def _one_error(capsys, argv: list[str]) -> str:
    """Run ``nas argv``: exit 2 and exactly one ``error:`` line on stderr, returned."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------- the helper


def test_check_output_refuses_each_case_in_one_line(tmp_path):
    (tmp_path / "file.txt").write_text("keep me")
    (tmp_path / "folder").mkdir()
    with pytest.raises(NasError, match=r"folder.*is a folder, and a file is expected"):
        check_output(tmp_path / "folder", "file")
    with pytest.raises(NasError, match=r"file\.txt: is a file, and a folder is expected"):
        check_output(tmp_path / "file.txt", "dir")
    with pytest.raises(NasError, match=r"file\.txt: the file exists; pass --overwrite to "
                                       r"replace it"):
        check_output(tmp_path / "file.txt", "file", overwrite_flag="--overwrite")
    with pytest.raises(NasError, match=r"the file exists; remove it, or name another file"):
        check_output(tmp_path / "file.txt", "file")
    with pytest.raises(NasError, match=r"its folder .*missing does not exist; create it first "
                                       r"\(mkdir -p "):
        check_output(tmp_path / "missing" / "out.tsv", "file")
    with pytest.raises(NasError, match=r"file\.txt is a file, not a folder"):
        check_output(tmp_path / "file.txt" / "out.tsv", "file")
    # what is allowed: nothing asked, an existing file to overwrite, a new or existing folder
    assert check_output(None) is None
    assert check_output(tmp_path / "file.txt", "file", overwrite=True) == tmp_path / "file.txt"
    assert check_output(tmp_path / "folder", "dir") == tmp_path / "folder"
    assert check_output(tmp_path / "new", "dir") == tmp_path / "new"
    assert (tmp_path / "file.txt").read_text() == "keep me"


# ------------------------------------------------------------------- each command's -o


def test_teacher_finetune_refuses_a_file_as_its_folder_before_training(tmp_path, capsys,
                                                                        monkeypatch):
    import nas.teacher

    monkeypatch.setattr(nas.teacher, "finetune_teacher", _work_started)
    (tmp_path / "model").write_text("a file")
    line = _one_error(capsys, ["teacher", "finetune", "--task", "sst2",
                               "-o", str(tmp_path / "model")])
    assert "model: is a file, and a folder is expected" in line
    line = _one_error(capsys, ["teacher", "finetune", "--task", "sst2",
                               "-o", str(tmp_path / "no" / "model")])
    assert f"its folder {tmp_path / 'no'} does not exist" in line


def test_augment_refuses_a_folder_or_an_existing_file_before_augmenting(tmp_path, capsys,
                                                                        monkeypatch):
    import nas.augment
    import nas.data

    monkeypatch.setattr(nas.data, "load_task", _work_started)
    monkeypatch.setattr(nas.augment, "augment_task", _work_started)
    argv = ["augment", "--task", "sst2", "-o"]
    line = _one_error(capsys, [*argv, str(tmp_path)])
    assert f"-o {tmp_path}: is a folder, and a file is expected" in line
    (tmp_path / "aug.tsv").write_text("old")
    line = _one_error(capsys, [*argv, str(tmp_path / "aug.tsv")])
    assert "aug.tsv: the file exists; pass --overwrite to replace it" in line
    # with --overwrite the checks pass and the work starts
    with pytest.raises(WorkStarted):
        main(["--debug", *argv, str(tmp_path / "aug.tsv"), "--overwrite"])


def test_spaces_sample_refuses_a_folder_instead_of_is_a_directory_error(tmp_path, capsys):
    line = _one_error(capsys, ["spaces", "sample", "adabert", "-o", str(tmp_path)])
    assert f"-o {tmp_path}: is a folder, and a file is expected" in line
    out = tmp_path / "arch.json"
    assert main(["spaces", "sample", "adabert", "-o", str(out)]) == 0
    first = out.read_text()
    line = _one_error(capsys, ["spaces", "sample", "adabert", "--seed", "1", "-o", str(out)])
    assert "arch.json: the file exists; pass --overwrite" in line
    assert out.read_text() == first
    assert main(["spaces", "sample", "adabert", "--seed", "1", "-o", str(out),
                 "--overwrite"]) == 0
    assert out.read_text() != first


def test_spaces_draw_refuses_a_missing_parent_before_drawing(tmp_path, capsys, monkeypatch):
    import nas.draw

    monkeypatch.setattr(nas.draw, "draw_architecture", _work_started)
    line = _one_error(capsys, ["spaces", "draw", "adabert", "-o",
                               str(tmp_path / "no" / "cell.png")])
    assert "does not exist; create it first" in line


def test_export_refuses_a_missing_parent_and_names_a_missing_run(tmp_path, capsys):
    line = _one_error(capsys, ["export", "--space", "tinybert", "--random-init",
                               "-o", str(tmp_path / "no" / "out")])
    assert f"its folder {tmp_path / 'no'} does not exist" in line
    line = _one_error(capsys, ["export", "--run", str(tmp_path / "missing")])
    assert f"{tmp_path / 'missing'}: the run folder does not exist" in line
    assert "multi-trial" not in line


# --------------------------------------------------------------------------- --storage


@pytest.fixture
def refuse_to_run(monkeypatch):
    """A storage that passes its check reaches the method's run, which must not train."""
    from nas.methods import METHODS

    monkeypatch.setattr(METHODS.get("adabert"), "_run", _work_started)


def _run_with_storage(storage: str, tmp_path: Path, *extra: str) -> list[str]:
    return ["run", str(LANAS_SMOKE), "--run-dir", str(tmp_path / "run"), "--no-progress",
            "--n-trials", "2", "--storage", storage, *extra]


def _journal(path: Path) -> Path:
    """A real Optuna journal holding one study with one finished trial."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(path)))
    study = optuna.create_study(study_name="s", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    return path


@pytest.mark.parametrize("kind", ["pickled", "garbage-text", "binary-lines", "folder"])
def test_a_bad_storage_file_is_refused_before_stage_1(kind, tmp_path, capsys, refuse_to_run):
    path = tmp_path / "study.journal"
    if kind == "pickled":
        path.write_bytes(pickle.dumps({"trials": list(range(100))}))
    elif kind == "garbage-text":
        path.write_text("this is not a journal\n")
    elif kind == "binary-lines":
        path.write_bytes(b"\x82\xff\x00\n" * 3)
    else:
        path.mkdir()
    line = _one_error(capsys, _run_with_storage(str(path), tmp_path))
    assert f"--storage {path}" in line
    assert ("not an Optuna journal" in line or "is a folder" in line), line
    assert "sqlite:///" in line  # the fix names the alternatives


def test_a_garbage_sqlite_file_is_refused_before_stage_1(tmp_path, capsys, refuse_to_run):
    db = tmp_path / "study.db"
    db.write_bytes(b"not a database" * 100)
    line = _one_error(capsys, _run_with_storage(f"sqlite:///{db}", tmp_path))
    assert "cannot open the storage" in line and "not a database" in line


def test_attach_to_a_missing_journal_is_refused_before_stage_1(tmp_path, capsys,
                                                              refuse_to_run):
    line = _one_error(capsys, _run_with_storage(str(tmp_path / "none.journal"), tmp_path,
                                                "--attach"))
    assert "no such journal file to --attach to" in line


@pytest.mark.parametrize("kind", ["journal", "cut-journal", "new-file", "empty-file"])
def test_a_good_storage_gets_past_the_check(kind, tmp_path, refuse_to_run):
    path = tmp_path / "study.journal"
    if kind in ("journal", "cut-journal"):
        _journal(path)
    if kind == "cut-journal":  # a kill during a write: judged by the resume, not here
        path.write_bytes(path.read_bytes() + b'{"op_code": 5, "worker')
    if kind == "empty-file":
        path.touch()
    with pytest.raises(WorkStarted):
        main(["--debug", *_run_with_storage(str(path), tmp_path)])


# ----------------------------------------------------------------------- nas cache


def _entry(folder: Path, size: int, days_old: float = 0.0) -> Path:
    folder.mkdir(parents=True)
    (folder / "data.bin").write_bytes(b"x" * size)
    stamp = time.time() - days_old * 86400
    for p in (folder / "data.bin", folder):
        os.utime(p, (stamp, stamp))
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    _entry(root / "teachers" / "sst2-aaaa", 1000, days_old=40)
    _entry(root / "teachers" / "sst2-bbbb", 500)
    _entry(root / "outputs" / "cccc", 300, days_old=40)
    (root / "augment").mkdir()
    monkeypatch.setenv("NAS_CACHE_DIR", str(root))
    return root


def test_cache_list_counts_entries_and_bytes_per_kind(cache, capsys):
    assert main(["cache", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["kind"]: (r["entries"], r["bytes"]) for r in data["kinds"]}
    assert rows["teachers"][0] == 2 and rows["teachers"][1] >= 1500
    assert rows["outputs"][0] == 1 and rows["outputs"][1] >= 300
    assert rows["augment"] == (0, 0)
    assert main(["cache", "list"]) == 0
    text = capsys.readouterr().out
    assert str(cache) in text and "teachers" in text and "2 entries" in text


def test_cache_clear_refuses_an_unknown_kind_listing_the_kinds(cache, capsys):
    for kind in ("teacher", "..", "../cache"):
        line = _one_error(capsys, ["cache", "clear", kind])
        assert f"unknown kind {kind!r}" in line and "augment, outputs, teachers" in line
    assert sorted(p.name for p in (cache / "teachers").iterdir()) == ["sst2-aaaa", "sst2-bbbb"]


def test_cache_clear_removes_one_kind_older_than_days(cache, capsys):
    assert main(["cache", "clear", "teachers", "--older-than", "30", "--dry-run"]) == 0
    assert (cache / "teachers" / "sst2-aaaa").is_dir()  # a dry run removes nothing
    assert main(["cache", "clear", "teachers", "--older-than", "30"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert [p.name for p in (cache / "teachers").iterdir()] == ["sst2-bbbb"]
    assert (cache / "outputs" / "cccc").is_dir()  # another kind: untouched
    assert main(["cache", "clear"]) == 0
    assert all(not any((cache / k).iterdir()) for k in ("teachers", "outputs", "augment"))


def test_cache_clear_never_removes_outside_the_cache(cache, tmp_path):
    outside = _entry(tmp_path / "precious", 10)
    (cache / "teachers" / "link").symlink_to(outside)  # an entry that is a link: unlinked
    (cache / "elsewhere").symlink_to(outside, target_is_directory=True)  # not a kind
    assert main(["cache", "clear", "elsewhere"]) == 2
    assert main(["cache", "clear"]) == 0
    assert (outside / "data.bin").read_bytes() == b"x" * 10
    assert not (cache / "teachers" / "link").exists()


def test_cache_clear_leaves_an_entry_being_written(cache, capsys):
    from nas.cache import exclusive

    entry = cache / "teachers" / "sst2-bbbb"
    with exclusive(entry / ".lock", "a test writer"):
        assert main(["cache", "clear", "teachers"]) == 0
    assert "left alone (in use by another process)" in capsys.readouterr().out
    assert entry.is_dir() and not (cache / "teachers" / "sst2-aaaa").exists()
