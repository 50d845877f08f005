"""Speed-ups in the runtime an export ships in (:mod:`nas.shipped`): the student's ONNX
graph against the teacher exported the same way, against the teacher in PyTorch fp32, and
the structural figure, all by the one timing protocol."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nas.cost import batch_for
from nas.export import export
from nas.hf import load_teacher_as_design
from nas.shipped import NO_FALLBACK, TEACHER_EXPORT, shipped_speedups, ships_onnx, teacher_export
from nas.space import get_space


def test_shipped_speedups_time_the_int8_graph_three_ways(tiny_teacher, tmp_path: Path):
    space, teacher = load_teacher_as_design(tiny_teacher)
    made: list[Path] = []
    given: list[dict] = []

    def export_fn(space, arch, folder, **keywords):
        made.append(Path(folder))
        given.append(keywords)
        return export(space, arch, folder, overwrite=True, labels=["neg", "pos"], **keywords)

    keywords = {"fmt": "onnx", "quantize": "int8", "max_int8_drop": 0.3,
                "trim": "never used for the teacher"}
    folder = teacher_export(export_fn, space, teacher, tmp_path / TEACHER_EXPORT, keywords)
    assert ships_onnx(folder) and made == [folder]
    # no vocabulary trim, and no fp32-layer search for a reference that is only timed
    assert "trim" not in given[0] and given[0]["max_int8_drop"] == NO_FALLBACK
    record = json.loads((folder / "config.json").read_text())["quantization"]
    assert record["dev"] == "not measured" and record["weights"] == "int8"
    # a resumed run finds it: not exported again
    assert teacher_export(export_fn, space, teacher, folder, keywords) == folder
    assert made == [folder]

    student_space = get_space("adabert")
    student = export(student_space, None, tmp_path / "student", fmt="onnx", quantize="int8",
                     random_init=True, labels=["neg", "pos"])
    native = export(student_space, None, tmp_path / "native", random_init=True,
                    labels=["neg", "pos"])
    assert ships_onnx(student) and not ships_onnx(native)
    batches = {1: batch_for(space, 1, 12), 2: batch_for(space, 2, 12)}
    import nas.runtime

    sessions: list[int] = []
    real_load = nas.runtime.load

    def load(*args, **kwargs):
        model = real_load(*args, **kwargs)
        if kwargs.get("runtime") == "onnx":
            sessions.append(model.network.get_session_options().intra_op_num_threads)
        return model

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a process at two threads: the sessions still get the one
    try:
        with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
            mp.setattr(nas.runtime, "load", load)
            timed = shipped_speedups(teacher, folder, student, batches, repeats=5, what="s")
    finally:
        torch.set_num_threads(threads)
    assert sessions == [1, 1] and timed["threads"] == 1
    assert timed["runtime"] == "onnx-int8"
    assert timed["vs_torch_fp32"]["runtime"] == "student onnx-int8, teacher torch-fp32"
    assert timed["structural"]["runtime"] == "torch-fp32"
    for record in (timed, timed["vs_torch_fp32"], timed["structural"]):
        for bs in (1, 2):
            row = record[f"batch{bs}"]
            assert row["rounds"] == 5 and row["teacher_ms"] > 0 and row["student_ms"] > 0
            assert row["speedup"] == row["speedup"]  # not NaN


def test_a_run_folder_given_relative_gets_its_teacher_export_inside_it(tmp_path, monkeypatch):
    """``--run-dir runs/x`` (relative, as the README's command gives it): the teacher's
    export goes to runs/x/teacher_export, not runs/x/runs/x/teacher_export (the run's
    export function joins a relative folder to the run folder)."""
    from types import SimpleNamespace

    from recipes.common import TaskContext

    monkeypatch.chdir(tmp_path)
    written: list[Path] = []

    def export_model(space, arch, folder, **keywords):
        target = ctx.run.path / folder  # what TaskContext.export_model does
        written.append(target)
        return target

    ctx = SimpleNamespace(run=SimpleNamespace(path=Path("runs/x")),
                          task_teacher=lambda: ("space", torch.nn.Linear(2, 2)),
                          export_model=export_model,
                          format_keywords=lambda fmt: {"fmt": fmt})
    TaskContext.teacher_export(ctx)  # type: ignore[arg-type]
    assert written == [tmp_path / "runs" / "x" / TEACHER_EXPORT]
