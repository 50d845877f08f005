"""A student against its teacher on the same examples: McNemar's test (McNemar 1947).

Two models scored on one test set are not two independent samples: on SST-2's 1,821
clean test sentences each accuracy carries a 95% interval of about ±1.4 points, yet
most sentences are answered alike by both models, and only the sentences on which they
disagree say which is better. McNemar's test looks only at those discordant pairs: under
"equally accurate", a sentence that exactly one of the two gets right is as likely to
be the student's as the teacher's, so the student's share of them is Binomial(n, 1/2)
(the exact test; :func:`scipy.stats.binomtest`). The paired difference in accuracy gets
the usual interval for paired proportions, ``d ± 1.96·se`` with
``se = sqrt(b + c − (b − c)²/n) / n`` (b, c: the discordant counts, n: the examples).

A run with a teacher records, for each export, the comparison on its report split in
``metrics.json`` → ``paired`` (:func:`paired_with_teacher`), both models loaded the
way a user loads them (:func:`nas.runtime.load`), so the student is the file that
ships (int8 where the run quantised it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: two-sided 95% normal quantile, for the paired difference's interval
Z95 = 1.959963984540054


def mcnemar(student_correct: Sequence[bool] | np.ndarray,
            teacher_correct: Sequence[bool] | np.ndarray) -> dict[str, Any]:
    """The exact McNemar test of two models' per-example correctness on the same examples
    (module docstring): accuracies, the discordant counts, the paired difference in
    points with its 95% interval, and the two-sided p-value."""
    from scipy.stats import binomtest

    student = np.asarray(student_correct, dtype=bool)
    teacher = np.asarray(teacher_correct, dtype=bool)
    if student.shape != teacher.shape or student.ndim != 1:
        raise ValueError(f"paired comparison needs one answer per example from each model, "
                         f"got {student.shape} and {teacher.shape}")
    n = int(student.size)
    if n == 0:
        raise ValueError("paired comparison of no examples")
    only_student = int(np.sum(student & ~teacher))
    only_teacher = int(np.sum(teacher & ~student))
    discordant = only_student + only_teacher
    diff = (only_student - only_teacher) / n
    se = math.sqrt(max(discordant - (only_student - only_teacher) ** 2 / n, 0.0)) / n
    p = binomtest(only_student, discordant, 0.5).pvalue if discordant else 1.0
    return {"examples": n,
            "student_accuracy": round(100 * float(student.mean()), 2),
            "teacher_accuracy": round(100 * float(teacher.mean()), 2),
            "student_only": only_student, "teacher_only": only_teacher,
            "difference": round(100 * diff, 2),
            "difference_95": [round(100 * (diff - Z95 * se), 2),
                              round(100 * (diff + Z95 * se), 2)],
            "p_value": float(p)}


def correct_answers(folder: str | Path, data: Any, *, by_name: bool = True) -> np.ndarray:
    """Whether the model in ``folder`` (an export or a Hugging Face model folder, loaded by
    :func:`nas.runtime.load`) answers each example of ``data`` right; labels are matched
    by name (:func:`nas.evaluate.label_indices`), or with ``by_name=False`` by position:
    a run's teacher, whose classes are the task's in the task's order however its
    ``config.json`` names them (a teacher cached before it was saved with the task's
    names reads ``LABEL_0, LABEL_1``)."""
    from nas.evaluate import export_predictions, label_indices
    from nas.runtime import load

    model = load(folder)
    if by_name:
        labels = np.asarray(label_indices(model.labels, data, {}, Path(folder)))
    else:
        if len(model.labels) != data.num_labels:
            from nas.errors import NasError

            raise NasError(f"{folder}: {len(model.labels)} classes, the task "
                           f"{data.task!r} has {data.num_labels}")
        labels = np.asarray(data.labels)
    return np.asarray(export_predictions(model, data) == labels)


def teacher_answers(teacher_dir: str | Path, data: Any) -> np.ndarray:
    """:func:`correct_answers` of a run's teacher on ``data`` (its classes by position),
    cached under the cache's ``teacher-answers`` by the teacher's weights
    (:func:`nas.teacher.teacher_identity`) and the examples' content
    (``data.fingerprint``): every run of one teacher on one report split pairs its
    students with the same answers, and scoring a 6-layer teacher costs more than the
    small students it is paired with. Data without a fingerprint is scored each time."""
    if not getattr(data, "fingerprint", ""):
        return correct_answers(teacher_dir, data, by_name=False)
    from nas.cache import cache_root, cached_entry, settings_key
    from nas.teacher import teacher_identity

    folder = cache_root() / "teacher-answers" / settings_key(
        teacher=teacher_identity(teacher_dir), data=data.fingerprint, examples=len(data))

    def score() -> dict[str, Any]:
        answers = correct_answers(teacher_dir, data, by_name=False)
        np.save(folder / "answers.npy", answers)
        return {"answers": str(folder / "answers.npy"), "examples": len(data),
                "teacher": str(teacher_dir)}

    record, _ = cached_entry(folder, "the teacher's answers", score)
    try:
        answers = np.load(record["answers"], allow_pickle=False)
    except (OSError, ValueError):
        answers = None
    if answers is None or answers.shape != (len(data),) or answers.dtype != bool:
        from nas.cache import corrupt_message
        from nas.errors import NasError

        raise NasError(corrupt_message(Path(record["answers"]), "the teacher's answers"))
    return answers


def paired_with_teacher(teacher_dir: str | Path, exports: Mapping[str, Path],
                        data: Any) -> dict[str, Any]:
    """Each export of ``exports`` (tag → folder; missing folders are skipped) against the
    teacher in ``teacher_dir`` on ``data`` (the run's report split): ``{split, examples,
    teacher_accuracy, points: {tag: mcnemar(...)}}``."""
    from nas.runtime import CONFIG_FILE

    teacher = teacher_answers(teacher_dir, data)
    points = {tag: mcnemar(correct_answers(folder, data), teacher)
              for tag, folder in exports.items() if (Path(folder) / CONFIG_FILE).is_file()}
    return {"split": data.split, "examples": len(data),
            "teacher_accuracy": round(100 * float(teacher.mean()), 2), "points": points}
