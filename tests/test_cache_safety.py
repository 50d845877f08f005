"""The cache cannot be turned against its user (:mod:`nas.cache`): ``nas cache clear|list``
act only on a folder the engine recognises as its cache, a clear leaves alone what a run
reads, and a corrupt or moved cache gives one line naming the file and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_outputs_checked_first import _one_error

from nas.cache import (
    MARKER,
    cached_entry,
    clear_cache,
    hold_shared,
    load_weights,
    read_scope,
    save_weights,
)
from nas.cli import main
from nas.errors import NasError


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _old_cache(root: Path) -> Path:
    """A cache as the engine wrote it before the marker: folders of known kinds only."""
    for entry in ("teachers/sst2-aaaa", "outputs/bbbb", "latency"):
        (root / entry).mkdir(parents=True)
    (root / "teachers" / "sst2-aaaa" / "result.json").write_text("{}")
    (root / "outputs" / "bbbb" / "logits.npy").write_bytes(b"x" * 10)
    return root


# ------------------------------------------------------------- what is a cache


def test_clear_and_list_refuse_a_folder_that_is_no_cache(tmp_path, capsys):
    home = tmp_path / "home"
    (home / "photos").mkdir(parents=True)
    (home / "photos" / "cat.jpg").write_bytes(b"meow")
    (home / "teachers").mkdir()  # one known name does not make a cache
    (home / "teachers" / "notes.txt").write_text("mine")
    before = _files(home)
    for argv in (["cache", "clear", "--cache-dir", str(home)],
                 ["cache", "clear", "teachers", "--cache-dir", str(home)],
                 ["cache", "list", "--cache-dir", str(home)]):
        line = _one_error(capsys, argv)
        assert f"{home} is not a nas-engine cache" in line and "'photos'" in line
        assert "nothing touched" in line and "--cache-dir" in line
    assert _files(home) == before and not (home / MARKER).exists()


@pytest.mark.parametrize("stranger", ["photos", ".git", "notes.txt"])
def test_an_unmarked_folder_with_anything_the_engine_never_writes_is_refused(tmp_path,
                                                                            stranger):
    root = _old_cache(tmp_path / "cache")
    if "." in stranger[1:]:
        (root / stranger).write_text("mine")
    else:
        (root / stranger).mkdir()
    before = _files(root)
    with pytest.raises(NasError, match=rf"not a nas-engine cache .* holds '{stranger}'"):
        clear_cache(root)
    assert _files(root) == before


def test_an_old_cache_of_known_kinds_is_accepted_and_marked(tmp_path, capsys):
    root = _old_cache(tmp_path / "cache")
    (root / ".DS_Store").write_bytes(b"")  # a hidden file is no reason to refuse
    assert main(["cache", "list", "--cache-dir", str(root)]) == 0
    assert "2 entries" in capsys.readouterr().out
    assert (root / MARKER).is_file()
    assert main(["cache", "clear", "teachers", "--cache-dir", str(root)]) == 0
    assert not any((root / "teachers").iterdir()) and (root / "outputs" / "bbbb").is_dir()


def test_a_marked_cache_may_hold_a_kind_the_engine_does_not_know(tmp_path):
    root = _old_cache(tmp_path / "cache")
    (root / MARKER).write_text("")
    (root / "my-plugin" / "entry").mkdir(parents=True)  # a plug-in's cached step
    result = clear_cache(root, "my-plugin")
    assert result["removed"] == [str(root / "my-plugin" / "entry")]


def test_a_missing_cache_is_empty_and_left_uncreated(tmp_path, capsys):
    root = tmp_path / "nowhere"
    assert main(["cache", "clear", "--cache-dir", str(root)]) == 0
    assert "removed 0 entries" in capsys.readouterr().out and not root.exists()


def test_the_engine_marks_the_cache_it_writes(tmp_path):
    root = tmp_path / "cache"
    record, trained = cached_entry(root / "importance" / "k1", "a test entry",
                                   lambda: {"x": 1})
    assert trained and record["x"] == 1
    assert (root / MARKER).is_file()


# ------------------------------------------------------------ readers' locks


def test_an_entry_a_run_reads_is_left_alone_and_named(tmp_path, capsys):
    root = _old_cache(tmp_path / "cache")
    entry = root / "teachers" / "sst2-aaaa"
    with read_scope():
        hold_shared(entry)  # a second open file of this process conflicts like a process
        assert main(["cache", "clear", "--cache-dir", str(root)]) == 0
        out = capsys.readouterr().out
        assert f"left alone (in use by another process): {entry}" in out
        assert entry.is_dir() and not (root / "outputs" / "bbbb").exists()
    assert clear_cache(root)["removed"] == [str(entry)]  # the scope ended: released


def test_an_entry_another_process_reads_is_left_alone(tmp_path):
    root = _old_cache(tmp_path / "cache")
    table = root / "latency" / "cpu-2cores.json"
    table.write_text("{}")
    code = ("import sys, time; from pathlib import Path; from nas.cache import hold_shared; "
            "hold_shared(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)")
    reader = subprocess.Popen([sys.executable, "-c", code, str(table)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "held"
        result = clear_cache(root, "latency")
        assert str(table) in result["busy"] and table.is_file()  # its lock file too
    finally:
        reader.kill()
        reader.wait(timeout=30)
    assert str(table) in clear_cache(root, "latency")["removed"]


# --------------------------------------------------------- corrupt and moved


def test_corrupt_cached_weights_name_the_file_and_the_clear(tmp_path):
    path = tmp_path / "cache" / "general" / "bert-abc" / "student.safetensors"
    path.parent.mkdir(parents=True)
    save_weights(torch.nn.Linear(2, 2), path)
    path.write_bytes(path.read_bytes()[:20])  # cut short
    with pytest.raises(NasError) as err:
        load_weights(torch.nn.Linear(2, 2), path)
    message = str(err.value)
    assert message.startswith(f"{path}: a cache file that does not load")
    assert "`nas cache clear general`" in message and "\n" not in message


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b'{"cut": ', b"[1, 2]"])
def test_a_corrupt_record_names_the_file_and_the_clear(tmp_path, content):
    folder = tmp_path / "cache" / "importance" / "k1"
    folder.mkdir(parents=True)
    (folder / "result.json").write_bytes(content)
    with pytest.raises(NasError, match=r"result\.json: a cache file that does not load .*"
                                       r"`nas cache clear importance`") as err:
        cached_entry(folder, "a test entry", lambda: {})
    assert "\n" not in str(err.value)


def test_a_corrupt_latency_table_names_the_file_and_the_clear(tmp_path):
    from nas.latency import LatencyError, LatencyTable

    path = tmp_path / "cache" / "latency" / "cpu-2cores.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x80\x81 binary")
    with pytest.raises(LatencyError, match=r"cpu-2cores\.json is broken .*"
                                           r"`nas cache clear latency`"):
        LatencyTable.load(path)


def test_a_record_s_paths_follow_a_moved_cache(tmp_path):
    old = tmp_path / "old" / "mixedvocab" / "stage1-k"

    def train() -> dict:
        (old / "w.safetensors").write_bytes(b"w")
        return {"weights": str(old / "w.safetensors"), "other": "/not/in/the/entry"}

    cached_entry(old, "a test entry", train)
    (tmp_path / "old").rename(tmp_path / "new")
    new = tmp_path / "new" / "mixedvocab" / "stage1-k"
    record, trained = cached_entry(new, "a test entry", train)
    assert not trained and record["weights"] == str(new / "w.safetensors")
    assert record["other"] == "/not/in/the/entry"


def test_a_moved_teacher_cache_keeps_working_and_a_corrupt_record_is_named(tiny_teacher,
                                                                          tmp_path):
    from nas.teacher import FinetuneConfig, finetune_teacher
    from nas.tokenization import load_tokenizer

    config = FinetuneConfig(epochs=1, batch_size=8, max_seq_len=32, max_train_examples=8,
                            max_dev_examples=8, lr=1e-3)

    def finetune(cache: Path):  # noqa: ANN202
        return finetune_teacher("sst2", str(tiny_teacher), config=config, cache_dir=cache,
                                progress=False)

    first = finetune(tmp_path / "a")
    assert not first.from_cache and first.model_dir.startswith(str(tmp_path / "a"))
    (tmp_path / "a").rename(tmp_path / "b")
    with read_scope():
        again = finetune(tmp_path / "b")
        assert again.from_cache and again.model_dir.startswith(str(tmp_path / "b"))
        load_tokenizer(again.model_dir)  # the record's old path is not used
        busy = clear_cache(tmp_path / "b", "teachers")["busy"]  # read by this "run"
        assert busy == [str(Path(again.model_dir).parent)]
    record = Path(again.model_dir).parent / "result.json"
    record.write_text(record.read_text()[:40])
    with pytest.raises(NasError, match=r"result\.json: a cache file that does not load .*"
                                       r"`nas cache clear teachers`"):
        finetune(tmp_path / "b")


def test_corrupt_teacher_weights_name_the_folder_and_the_clear(tiny_teacher, tmp_path):
    import shutil

    from nas.teacher import TeacherError, load_teacher

    model = tmp_path / "cache" / "teachers" / "sst2-abc" / "model"
    shutil.copytree(tiny_teacher, model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(TeacherError, match=r"model: the teacher's weights do not load .*"
                                           r"`nas cache clear teachers`") as err:
        load_teacher(str(model), num_labels=2)
    assert "\n" not in str(err.value)


def test_a_missing_tokenizer_inside_a_cache_says_what_happened_and_the_fix(tmp_path):
    from nas.tokenization import load_tokenizer

    gone = tmp_path / "cache" / "teachers" / "sst2-abc" / "model"
    with pytest.raises(NasError) as err:
        load_tokenizer(gone)
    message = str(err.value)
    assert message.startswith(f"tokenizer folder {gone} does not exist")
    assert "cache was moved or the entry cleared" in message and "NAS_CACHE_DIR" in message
    with pytest.raises(NasError) as err:
        load_tokenizer(tmp_path / "mine")  # outside a cache: the plain message
    assert str(err.value) == f"tokenizer folder {tmp_path / 'mine'} does not exist"
