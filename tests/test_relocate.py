"""A run folder is self-contained and relocatable (2e65232): its own storage is recorded
relative to it, so a copy resumes into its own files and never into the original's; a
copy whose old pointer names another run folder's file is refused; run names cannot
leave ``runs/``; a journal cut mid-line is repaired. The evaluator is the cost model
(milliseconds)."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil

import pytest

from evaluators.costs import CostEvaluator
from nas.config import ConfigError
from nas.errors import NasError
from nas.methods import load_experiment
from nas.space import get_space, small_config
from searchers.loop import StudyOptions, StudySettings, StudySpec, evaluations, run_study
from searchers.results import open_run_study
from searchers.storage import StorageError, open_storage


@pytest.fixture(scope="module")
def space():
    return get_space("adabert", **small_config("adabert"))


def study_in(folder, space, n_trials, *, resume=False, storage=None):
    spec = StudySpec.for_run(searcher="tpe", name="reloc", run_dir=folder, seed=0,
                             settings=StudySettings(samplers={"tpe": {"n_startup_trials": 2}}),
                             options=StudyOptions(n_trials=n_trials, storage=storage),
                             default_trials=n_trials, resume=resume, seq_len=8)
    return run_study(spec, space, CostEvaluator(space, ("params",), seq_len=8))


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("storage", [None, "sqlite:///{a}/study.db"])
def test_a_copied_run_resumes_into_its_own_storage(tmp_path, space, storage):
    a, b = tmp_path / "A", tmp_path / "B"
    given = storage.format(a=a) if storage else None
    study_in(a, space, 3, storage=given)
    pointer = json.loads((a / "study.json").read_text())
    name = "study.journal" if storage is None else "study.db"
    assert pointer["storage"] == (name if storage is None else f"sqlite:///{name}")
    shutil.copytree(a, b)
    before = digest(a / name)
    copy = study_in(b, space, 5, resume=True)
    assert evaluations(copy) == 5
    assert digest(a / name) == before  # the original's storage untouched, byte for byte
    assert evaluations(open_run_study(a)) == 3 and evaluations(open_run_study(b)) == 5
    assert sorted(p.parent.name for p in a.glob("trials/*/result.json")) == ["0", "1", "2"]
    assert len(list(b.glob("trials/*/result.json"))) == 5
    # moved instead of copied: the run opens from its new place
    moved = shutil.move(b, tmp_path / "C")
    assert evaluations(study_in(moved, space, 6, resume=True)) == 6


def test_storage_named_outside_the_folder_is_recorded_as_given(tmp_path, space):
    shared = tmp_path / "shared" / "s.journal"
    study_in(tmp_path / "A", space, 2, storage=str(shared))
    pointer = json.loads((tmp_path / "A" / "study.json").read_text())
    assert pointer["storage"] == str(shared.resolve())
    shutil.copytree(tmp_path / "A", tmp_path / "B")  # a copy of a worker of a shared study
    assert evaluations(study_in(tmp_path / "B", space, 3, resume=True)) == 3
    assert evaluations(open_run_study(tmp_path / "A")) == 3  # the one shared study


def test_a_copy_whose_old_pointer_names_another_run_folder_is_refused(tmp_path, space):
    a, b = tmp_path / "A", tmp_path / "B"
    study_in(a, space, 3)
    pointer = json.loads((a / "study.json").read_text())
    # the pointer as code before 2e65232 wrote it: the journal's absolute path
    old = {k: v for k, v in pointer.items() if k != "relative_to_folder"}
    old["storage"] = str((a / "study.journal").resolve())
    (a / "study.json").write_text(json.dumps(old))
    shutil.copytree(a, b)
    before = digest(a / "study.journal")
    with pytest.raises(NasError, match=r"B/study.json: its study storage .*A/study.journal "
                       r"lies in another run folder.*--storage .*B/study.journal") as err:
        study_in(b, space, 5, resume=True)
    assert "\n" not in str(err.value)
    assert digest(a / "study.journal") == before
    # the old pointer in its own folder still resumes, and the fix given works for the copy
    assert evaluations(study_in(a, space, 4, resume=True)) == 4
    assert evaluations(study_in(b, space, 5, resume=True,
                                storage=str(b / "study.journal"))) == 5
    assert evaluations(open_run_study(a)) == 4


@pytest.mark.parametrize("name", ["../../../escape", "a/b", "a\\b", "/srv/x", "..", "."])
def test_run_names_that_leave_runs_are_refused(name):
    with pytest.raises(ConfigError, match=r"name must be a plain folder name") as err:
        load_experiment("experiments/lanas_smoke.yaml", [f"name={name}"])
    assert "\n" not in str(err.value)


def test_a_journal_cut_mid_line_is_repaired_with_one_warning(tmp_path, space, caplog):
    run = tmp_path / "A"
    study_in(run, space, 3)
    journal = run / "study.journal"
    whole = journal.read_bytes()
    last = whole[:-1].rfind(b"\n") + 1
    journal.write_bytes(whole[:last + (len(whole) - last) // 2])  # killed mid-write
    with caplog.at_level(logging.WARNING, logger="nas.study"):
        study = study_in(run, space, 5, resume=True)
    warnings = [r for r in caplog.records if "cut during a write" in r.getMessage()]
    assert len(warnings) == 1 and str(journal) in warnings[0].getMessage()
    assert evaluations(study) == 5
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())


def test_a_journal_damaged_before_its_end_is_refused_naming_the_file(tmp_path, space):
    run = tmp_path / "A"
    study_in(run, space, 2)
    journal = run / "study.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][:10] + lines[2]  # a cut line that an append was glued onto
    journal.write_bytes(b"".join(lines))
    with pytest.raises(StorageError, match=r"study.journal: line 2 of the study journal is "
                       r"damaged.*new --run-dir") as err:
        open_storage(str(journal))
    assert "\n" not in str(err.value)


class Weighing(CostEvaluator):
    """The cost evaluator that also writes "trained weights" into ``workdir``, as the
    training evaluators do."""

    def __init__(self, space, workdir) -> None:
        super().__init__(space, ("params",), seq_len=8)
        self.workdir = workdir

    def weights_path(self, arch):
        return self.workdir / arch.id / "w.bin"

    def evaluate(self, arch, trial=None):
        self.weights_path(arch).parent.mkdir(parents=True, exist_ok=True)
        self.weights_path(arch).write_bytes(arch.id.encode())
        return super().evaluate(arch, trial)


def test_trial_weights_are_recorded_relative_to_the_run_folder(tmp_path, space):
    from searchers.results import trial_weights

    a, b = tmp_path / "A", tmp_path / "B"
    spec = StudySpec.for_run(searcher="random", name="w", run_dir=a, seed=0,
                             settings=StudySettings(), options=StudyOptions(n_trials=2),
                             default_trials=2, seq_len=8)
    run_study(spec, space, Weighing(space, a / "retrain"))
    shutil.copytree(a, b)
    shutil.rmtree(a)  # moved: the copy's trials export the copy's weights
    for trial in open_run_study(b).trials:
        recorded = trial.user_attrs["weights"]
        assert recorded == f"retrain/{trial.user_attrs['arch_id']}/w.bin"
        assert trial_weights(trial, b) == str((b / recorded).resolve())
        record = json.loads((b / "trials" / str(trial.number) / "result.json").read_text())
        assert record["weights"] == recorded


def test_a_resumed_copy_is_refused_before_any_stage(tmp_path, space):
    """The refusal comes when the run folder is opened, before stage 1 (the teacher), for
    the studies of the folder and of its stages' subfolders (EfficientBERT's)."""
    from nas.methods import RunOptions

    a, b = tmp_path / "A", tmp_path / "B"
    study_in(a / "stage", space, 2)
    pointer = json.loads((a / "stage" / "study.json").read_text())
    pointer.pop("relative_to_folder")
    pointer["storage"] = str((a / "stage" / "study.journal").resolve())
    (a / "stage" / "study.json").write_text(json.dumps(pointer))
    shutil.copytree(a, b)
    method, config = load_experiment("experiments/lanas_smoke.yaml")
    with pytest.raises(NasError, match=r"B/stage/study.json: .* lies in another run folder"):
        method.open(config, RunOptions(run_dir=b, resume=True))
    assert not (b / "config.yaml").exists()  # refused before the run folder was opened


@pytest.mark.parametrize("recorded", ["../B/study.journal", "sqlite:///../B/study.db",
                                      "link/study.journal"])
def test_a_relative_storage_outside_the_run_folder_is_refused(tmp_path, space, recorded):
    """A ``study.json`` whose relative storage leaves its folder (``..`` or a symlink) is
    refused on --resume and by ``nas export --run``: it would write and export another
    run's study as this one's."""
    a, b = tmp_path / "A", tmp_path / "B"
    study_in(a, space, 2)
    study_in(b, space, 2, storage=f"sqlite:///{b}/study.db" if "sqlite" in recorded else None)
    (a / "link").symlink_to(b)
    pointer = json.loads((a / "study.json").read_text())
    pointer["storage"] = recorded
    (a / "study.json").write_text(json.dumps(pointer))
    other = b / ("study.db" if "sqlite" in recorded else "study.journal")
    before = digest(other)
    for attempt in (lambda: study_in(a, space, 4, resume=True), lambda: open_run_study(a)):
        with pytest.raises(NasError, match=r"A/study.json: storage '.*' resolves outside the "
                           r"run folder .*B/study\.(journal|db).*set it to study.journal") as err:
            attempt()
        assert "\n" not in str(err.value)
    assert digest(other) == before
