"""No damage and no silent wrong answer: an export never leaves a partial folder and
refuses an unusable ``-o`` before any work; an empty ``--run-dir`` is refused; a plug-in
that exits or raises a ``BaseException`` is named in one line; ``nas.search(plugins=)``
takes one file as a string; CR line ends are line ends for ``nas predict --file``; an
export's label names come from ``id2label`` alone, and a ``config.json`` whose label keys
disagree is refused. (A run folder's storage that leaves the folder: tests/test_relocate.py.)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from test_outputs_checked_first import _one_error

from nas.errors import ExportError, NasError
from nas.export import export
from nas.space import get_space

SMOKE = Path(__file__).resolve().parents[1] / "experiments" / "lanas_smoke.yaml"
EXPORT = ["export", "--space", "tinybert", "-c", "num_hidden_layers=1", "--random-init"]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial" in p.name or ".old" in p.name)


@pytest.fixture
def tiny():
    return get_space("tinybert", num_hidden_layers=1)


# --------------------------------------------------------------------------- exports

def test_export_to_a_dangling_symlink_is_refused_before_any_work(tmp_path, capsys, tiny):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone" / "deeper")
    line = _one_error(capsys, [*EXPORT, "-o", str(link)])
    assert f"-o {link}: is a symbolic link to a missing" in line and "remove the link" in line
    with pytest.raises(ExportError, match=r"out: is a symbolic link to a missing .*gone"):
        export(tiny, None, link, random_init=True)  # the run's own export stage too
    assert _leftovers(tmp_path) == [] and link.is_symlink()


def _creatable(folder: str) -> bool:
    try:
        fd, probe = tempfile.mkstemp(dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


@pytest.mark.skipif(not Path("/sys").is_dir() or _creatable("/sys"),
                    reason="needs /sys, where no one can create a file")
def test_export_into_an_unwritable_folder_is_refused_in_one_line(capsys):
    line = _one_error(capsys, [*EXPORT, "-o", "/sys/x"])
    assert line == ("error: -o /sys/x: the folder /sys is not writable; name a folder you can "
                    "write to")


def test_a_failed_export_leaves_no_partial_folder(tmp_path, tiny, monkeypatch):
    import nas.export as module

    def broken(out):
        raise KeyboardInterrupt  # any failure, an interrupt included

    monkeypatch.setattr(module, "_readable", broken)
    with pytest.raises(KeyboardInterrupt):
        export(tiny, None, tmp_path / "a", random_init=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.undo()
    # a move into place that fails (a link made after the checks) leaves nothing either
    monkeypatch.setattr(module, "check_target", lambda out, overwrite: None)
    link = tmp_path / "b"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(ExportError, match=r"b: cannot move the export into place"):
        export(tiny, None, link, random_init=True)
    assert _leftovers(tmp_path) == [] and link.is_symlink()


# --------------------------------------------------------------------------- --run-dir

@pytest.mark.parametrize("command", ["run", "audit"])
@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_run_dir_is_refused(capsys, tmp_path, monkeypatch, command, given):
    monkeypatch.chdir(tmp_path)  # where runs/<name> would have been made
    line = _one_error(capsys, [command, str(SMOKE), "--run-dir", given])
    assert line.startswith(f"error: --run-dir {given!r}: empty; name a folder")
    assert not (tmp_path / "runs").exists()


def test_search_refuses_an_empty_run_dir(tmp_path, monkeypatch):
    import nas

    monkeypatch.chdir(tmp_path)
    with pytest.raises(NasError, match=r"^run_dir '': empty; name a folder") as err:
        nas.search("adabert", task="sst2", run_dir="")
    assert "\n" not in str(err.value) and list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- plug-ins

@pytest.mark.parametrize(("body", "raised"), [
    ("import sys\nsys.exit(3)\n", "line 2: SystemExit(3) (it called sys.exit or exit)"),
    ("class Stop(BaseException):\n    pass\n\nraise Stop('no')\n", "line 4: Stop: no"),
])
def test_a_plugin_that_exits_or_raises_a_base_exception_is_named_in_one_line(
        capsys, tmp_path, body, raised):
    plugin = tmp_path / "exits.py"
    plugin.write_text(body)
    line = _one_error(capsys, ["run", str(SMOKE), "--plugin", str(plugin), "--dry-run"])
    assert line == (f"error: {SMOKE}: plugin {plugin} failed to import: {raised}; fix the "
                    "file or drop it from plugins")


def test_a_plugin_interrupted_by_the_user_still_interrupts(tmp_path):
    from nas.plugins import import_plugins

    plugin = tmp_path / "interrupted.py"
    plugin.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        import_plugins([str(plugin)])


@pytest.mark.parametrize("as_path", [False, True])
def test_search_takes_one_plugin_file_as_a_string_or_path(tmp_path, monkeypatch, as_path):
    import nas

    monkeypatch.chdir(tmp_path)
    plugin = tmp_path / f"mine_{as_path}.py"  # a new name each time: imported once a process
    plugin.write_text("raise RuntimeError('the plug-in ran')\n")
    with pytest.raises(NasError, match=rf"^nas.search\(\): plugin {plugin} failed to import: "
                       r"line 1: RuntimeError: the plug-in ran"):
        nas.search("adabert", task="sst2", plugins=plugin if as_path else str(plugin))


@pytest.mark.parametrize("plugins", [3, {"mine.py"}, ["ok.py", 4]])
def test_search_refuses_plugins_of_another_type_in_one_line(plugins):
    import nas

    with pytest.raises(NasError, match=r"^plugins=.*: expected a file path or module name, "
                       r"or a list of them; e.g. plugins=\['my_space.py'\]$"):
        nas.search("adabert", task="sst2", plugins=plugins)


# --------------------------------------------------------------------------- line ends

def test_cr_and_mixed_line_ends_are_line_ends(tmp_path):
    from nas.textfile import Row, count_rows, read_rows

    text = tmp_path / "texts.txt"
    text.write_bytes(b"a fine film\rdull\r\nbad\n\r\xc3\xa9clat\r")  # CR, CRLF, LF, blank, CR
    assert list(read_rows(text)) == [Row(1, "a fine film"), Row(2, "dull"), Row(3, "bad"),
                                     Row(5, "\u00e9clat")]
    assert count_rows(text) == 4
    table = tmp_path / "texts.csv"
    table.write_bytes(b'text,label\r"a fine, film",1\r\n"two\rlines",0\rdull,0')
    rows = list(read_rows(table))
    assert [r.text for r in rows] == ["a fine, film", "two\rlines", "dull"]
    tsv = tmp_path / "texts.tsv"
    tsv.write_bytes(b"text\tlabel\rgood\t1\rbad\t0\r")
    assert [r.text for r in read_rows(tsv)] == ["good", "bad"] and count_rows(tsv) == 2
    jsonl = tmp_path / "texts.jsonl"
    jsonl.write_bytes(b'{"text": "good"}\r{"text": "bad"}\r\n')
    assert [(r.line, r.text) for r in read_rows(jsonl)] == [(1, "good"), (2, "bad")]


def test_a_bad_byte_is_named_on_its_own_cr_line(tmp_path):
    from nas.errors import DataError
    from nas.textfile import read_rows

    path = tmp_path / "texts.txt"
    path.write_bytes(b"good\rfine\r\xffbad\r")
    with pytest.raises(DataError, match=r"texts.txt: line 3 is not UTF-8 text \(byte 0xff\)"):
        list(read_rows(path))


# --------------------------------------------------------------------------- labels

@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    space = get_space("tinybert", num_hidden_layers=1)
    return export(space, None, tmp_path_factory.mktemp("labels") / "m", labels=["neg", "pos"],
                  random_init=True)


def _edited(labelled, tmp_path, **keys):
    """A copy of the export whose ``config.json`` has ``keys`` replaced (None: removed)."""
    import json
    import shutil

    copy = Path(shutil.copytree(labelled, tmp_path / "edited"))
    config = json.loads((copy / "config.json").read_text())
    for key, value in keys.items():
        config.pop(key) if value is None else config.__setitem__(key, value)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_the_engine_writes_agreeing_label_keys(labelled):
    import json

    from nas.runtime import load

    config = json.loads((labelled / "config.json").read_text())
    assert config["labels"] == ["neg", "pos"]
    assert config["id2label"] == {"0": "neg", "1": "pos"}
    assert config["label2id"] == {"neg": 0, "pos": 1}
    assert load(labelled).labels == ["neg", "pos"]


def test_labels_edited_alone_are_refused_by_predict_and_evaluate(labelled, tmp_path, capsys):
    edited = _edited(labelled, tmp_path, labels=["pos", "neg"])
    for argv in (["predict", str(edited), "a fine film"],
                 ["evaluate", str(edited), "--task", "sst2"]):
        line = _one_error(capsys, argv)
        assert line == (f"error: {edited / 'config.json'}: the keys labels ['pos', 'neg'] and "
                        "id2label ['neg', 'pos'] disagree; make them name the classes alike "
                        "(id2label is the one stock transformers reads), or re-export the model")


@pytest.mark.parametrize(("keys", "message"), [
    ({"label2id": {"neg": 1, "pos": 0}}, r"the keys label2id \{'neg': 1, 'pos': 0\} and "
                                         r"id2label \['neg', 'pos'\] disagree"),
    ({"id2label": {"0": "neg", "2": "pos"}}, r"id2label's keys must be the class ids 0..1"),
    ({"id2label": None, "label2id": {"pos": 0, "neg": 1}},
     r"the keys label2id .* and labels \['neg', 'pos'\] disagree"),
])
def test_label_keys_that_disagree_are_refused_naming_the_file(labelled, tmp_path, keys,
                                                              message):
    from nas.runtime import load

    with pytest.raises(ExportError, match=r"edited/config.json: " + message) as err:
        load(_edited(labelled, tmp_path, **keys))
    assert "\n" not in str(err.value)


def test_id2label_names_the_classes_and_old_exports_still_load(labelled, tmp_path):
    from nas.runtime import load

    both = {"id2label": {"0": "pos", "1": "neg"}, "label2id": {"pos": 0, "neg": 1}}
    swapped = load(_edited(labelled, tmp_path, labels=["pos", "neg"], **both))
    assert swapped.labels == ["pos", "neg"]  # what a stock pipeline reads
    assert list(swapped.predict(["a fine film"])[0]["probabilities"]) == ["pos", "neg"]
    old = load(_edited(labelled, tmp_path / "old", id2label=None, label2id=None))
    assert old.labels == ["neg", "pos"]
