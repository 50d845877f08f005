"""McNemar's test and the paired difference (nas.paired) on counts worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from nas.paired import mcnemar


def _answers(both: int, only_student: int, only_teacher: int, neither: int):
    student = [True] * both + [True] * only_student + [False] * only_teacher + [False] * neither
    teacher = [True] * both + [False] * only_student + [True] * only_teacher + [False] * neither
    return np.array(student), np.array(teacher)


def test_six_discordant_examples_all_the_students_give_p_of_one_in_32():
    # under the null each discordant example is the student's with probability 1/2:
    # P(6 of 6 or 0 of 6) = 2 / 2**6
    result = mcnemar(*_answers(90, 6, 0, 4))
    assert result["p_value"] == pytest.approx(2 / 64)
    assert (result["student_only"], result["teacher_only"]) == (6, 0)
    assert result["student_accuracy"] == 96.0 and result["teacher_accuracy"] == 90.0
    assert result["difference"] == 6.0


def test_the_interval_is_the_paired_one():
    # b = 10, c = 30, n = 400: d = -0.05, se = sqrt(40 - 400/400) / 400
    result = mcnemar(*_answers(300, 10, 30, 60))
    se = np.sqrt(40 - 1) / 400
    assert result["difference"] == -5.0
    assert result["difference_95"] == [round(100 * (-0.05 - 1.959964 * se), 2),
                                       round(100 * (-0.05 + 1.959964 * se), 2)]
    assert result["p_value"] < 0.01


def test_identical_answers_are_no_evidence():
    result = mcnemar(*_answers(50, 0, 0, 50))
    assert result["p_value"] == 1.0 and result["difference_95"] == [0.0, 0.0]


def test_answers_that_do_not_pair_are_refused():
    with pytest.raises(ValueError, match="one answer per example"):
        mcnemar([True, False], [True])
    with pytest.raises(ValueError, match="no examples"):
        mcnemar([], [])


def test_a_teacher_named_label_0_label_1_is_paired_by_its_class_order(tiny_teacher):
    """A run's teacher cached before it was saved with the task's names reads LABEL_0,
    LABEL_1: by name it is refused, by position (the run's own class order) it is scored,
    and a class count that differs from the task's is refused."""
    from nas.data.tasks import TaskData
    from nas.errors import NasError
    from nas.paired import correct_answers

    data = TaskData(task="sst2", split="test", kind="single", texts_a=("good", "bad film"),
                    labels=(1, 0), label_names=("negative", "positive"))
    with pytest.raises(NasError, match="is not a label of the model"):
        correct_answers(tiny_teacher, data)
    right = correct_answers(tiny_teacher, data, by_name=False)
    assert right.shape == (2,) and right.dtype == bool
    three = TaskData(task="x", split="test", kind="single", texts_a=("a",), labels=(2,),
                     label_names=("a", "b", "c"))
    with pytest.raises(NasError, match="2 classes, the task 'x' has 3"):
        correct_answers(tiny_teacher, three, by_name=False)


def test_the_teachers_answers_are_scored_once_per_teacher_and_split(tiny_teacher, tmp_path,
                                                                    monkeypatch):
    """Every run of one teacher on one report split pairs with the same cached answers;
    other examples are scored again; a damaged cache file is named in one line."""
    import nas.paired as paired
    from nas.data.tasks import TaskData
    from nas.errors import NasError

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    texts = ("good", "bad film", "a long and tedious film about nothing much", "fine")
    data = TaskData(task="sst2", split="test", kind="single", texts_a=texts,
                    labels=(1, 0, 0, 1), label_names=("negative", "positive"),
                    fingerprint="four-texts")
    first = paired.teacher_answers(tiny_teacher, data)
    assert np.array_equal(first, paired.correct_answers(tiny_teacher, data, by_name=False))

    scored: list[int] = []
    real = paired.correct_answers
    monkeypatch.setattr(paired, "correct_answers",
                        lambda *a, **k: scored.append(1) or real(*a, **k))
    assert np.array_equal(paired.teacher_answers(tiny_teacher, data), first) and not scored
    other = data.subset([0, 1])
    assert paired.teacher_answers(tiny_teacher, other).shape == (2,) and scored == [1]

    saved = sorted((tmp_path / "cache" / "teacher-answers").glob("*/answers.npy"))
    assert len(saved) == 2
    for damaged in (b"not numpy", np.lib.format.MAGIC_PREFIX):
        for path in saved:
            path.write_bytes(damaged)
        with pytest.raises(NasError, match="a cache file that does not load"):
            paired.teacher_answers(tiny_teacher, data)
