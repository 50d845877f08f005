"""Every final point of one or more SST-2 runs, scored the way the levers' sweep chooses
and reports: accuracy on the dev rows that share no 8-word phrase with train (the split that
chooses settings), on the clean test sentences (the report), and paired with the run's
teacher on those test sentences (:mod:`nas.paired`: the difference with its 95% interval
and McNemar's exact p), beside each point's retrain steps and seconds and its in-run
speed-ups (structural, both in PyTorch fp32; and as shipped where the run exported ONNX).

Run: ``OMP_NUM_THREADS=1 NAS_DATA_DIR=... python benchmarks/final_points.py RUN [RUN...]
[--against BASE]`` (one JSON line per point). A run of another SST-2 task than ``sst2``
(a carve of whole training sentences as its dev split,
``benchmarks/carve_sst2_sentences.py``) is also scored on its own dev split
(``run_dev``, with each seed's ``dev_seeds`` from the run); ``--against BASE`` pairs
each point with BASE's point of the same tag on that split and on test (McNemar, as
with the teacher): an arm against the plain arm, on the examples they share.
Each point's seed-0 export (``RUN/final/<tag>/export``) is scored as a user loads it
(:func:`nas.runtime.load`), the teacher from ``RUN/teacher.json``'s ``model_dir``.
SST-2's ``dev.tsv`` shares phrases with ``train.tsv`` (it overstates students); the
clean rows are those :func:`nas.data.overlap.overlapping` marks ``NONE`` (307 of 872).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any


def _clean_dev_and_test(data_dir: str | None) -> tuple[Any, Any]:
    from nas.data import load_task
    from nas.data.overlap import NONE, overlapping

    train = load_task("sst2", "train", data_dir)
    dev = load_task("sst2", "dev", data_dir)
    flags = overlapping(list(train.texts_a), list(dev.texts_a))
    clean = dev.subset([i for i, flag in enumerate(flags) if flag == NONE])
    return clean, load_task("sst2", "test", data_dir)


def _run_dev(run: Path) -> Any:
    """The run's own dev split, when its task is not ``sst2`` (a carve), else ``None``."""
    import yaml

    from nas.data import load_task, resolve_task

    task = yaml.safe_load((run / "config.yaml").read_text())["task"]
    if task == "sst2":
        return None
    return load_task(resolve_task(task), "dev", os.environ.get("NAS_DATA_DIR"))


def _speedups(metrics: dict[str, Any], tag: str) -> dict[str, Any]:
    timed = ((metrics.get("speedup") or {}).get("final") or {}).get(tag) or {}
    out = {}
    for name, block in (("structural", timed.get("structural") or (
            timed if timed.get("runtime") == "torch-fp32" else None)),
            ("shipped_vs_torch_fp32", timed.get("vs_torch_fp32"))):
        if block:
            out[name] = [round(block[f"batch{b}"]["speedup"], 2) for b in (1, 32)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders of method compress/search")
    ap.add_argument("--against", type=Path, help="a run to pair each point with, by tag")
    args = ap.parse_args()

    import numpy as np

    from nas.paired import correct_answers, mcnemar

    clean, test = _clean_dev_and_test(os.environ.get("NAS_DATA_DIR"))
    teachers: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for run in args.runs:
        teacher = json.loads((run / "teacher.json").read_text())["model_dir"]
        if teacher not in teachers:
            teachers[teacher] = (correct_answers(teacher, clean, by_name=False),
                                 correct_answers(teacher, test, by_name=False))
        teacher_clean, teacher_test = teachers[teacher]
        metrics = json.loads((run / "metrics.json").read_text())
        run_dev = _run_dev(run)
        # a carve's file labels its classes 0 and 1, sst2 negative and positive: the same
        # classes in the same order, matched by position
        by_name = run_dev is None

        def answers(folder: Path, data: Any, by_name: bool = by_name) -> Any:
            return correct_answers(folder, data, by_name=by_name)

        for row in metrics["final"]:
            export = run / "final" / row["tag"] / "export"
            paired = mcnemar(answers(export, test), teacher_test)
            first = row["seeds"][0]
            extra: dict[str, Any] = {}
            if run_dev is not None:
                own = answers(export, run_dev)
                extra = {"run_dev": round(100 * own.mean(), 2), "run_dev_examples": len(own),
                         "dev_seeds": [round(100 * s["dev"]["accuracy"], 2)
                                       for s in row["seeds"]]}
            if args.against is not None:
                base = args.against / "final" / row["tag"] / "export"
                for name, data in (("run_dev", run_dev), ("test", test)):
                    if data is not None:
                        vs = mcnemar(answers(export, data), answers(base, data))
                        extra[f"vs_{args.against.name}_{name}"] = {
                            "difference": vs["difference"], "difference_95": vs["difference_95"],
                            "p_value": round(vs["p_value"], 4),
                            "right_only_here": vs["student_only"],
                            "right_only_there": vs["teacher_only"]}
            print(json.dumps({
                "run": run.name, "tag": row["tag"], "params": first["params"],
                "clean_dev": round(100 * answers(export, clean).mean(), 2),
                "teacher_clean_dev": round(100 * teacher_clean.mean(), 2),
                "test_seed0": paired["student_accuracy"],
                "test_seeds": [round(100 * s["test"]["accuracy"], 2) for s in row["seeds"]],
                "teacher_test": paired["teacher_accuracy"],
                "vs_teacher": paired["difference"], "vs_teacher_95": paired["difference_95"],
                "mcnemar_p": round(paired["p_value"], 4),
                "train_steps": first.get("train_steps"),
                "train_seconds": first.get("train_seconds"),
                "distilled_from": first.get("distilled_from", "teacher"),
                **_speedups(metrics, row["tag"]), **extra}), flush=True)


if __name__ == "__main__":
    main()
