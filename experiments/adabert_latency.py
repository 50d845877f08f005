"""Re-time a finished AdaBERT run's teacher and searched student side by side.

Run: ``python experiments/adabert_latency.py RUN_DIR [--repeats 30]``. The teacher and the
student are timed in alternating rounds on the same batches (the run's report split,
batch 1 and 32 at its median token length, one CPU thread), so a busy machine slows
both alike; prints the medians and the ratio. A run's own numbers are measured at
different moments (the teacher before the search, the student after its retrain).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from nas.data import iter_batches, load_task, report_split
from nas.measure import HFAdapter, median_length_batches
from nas.runtime import load
from nas.teacher import load_teacher
from nas.tokenization import load_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = Path(args.run_dir)
    metrics = json.loads((run / "metrics.json").read_text())
    max_len = metrics["teacher"]["seq_len"]
    exported = load(run / "export")
    task = exported.config["task"]
    tokenizer = load_tokenizer(run / "export")
    report = load_task(task, report_split(task))

    def batches(data, batch_size):  # single sentences, as the recipe feeds them
        return iter_batches(data, tokenizer, batch_size, max_len)

    _, latency_batches = median_length_batches(report, tokenizer, max_len, batches)
    teacher = HFAdapter(load_teacher(metrics["teacher"]["model_dir"],
                                     num_labels=len(exported.labels))).eval()
    student = exported.network.eval()
    rows = {}
    for bs, batch in sorted(latency_batches.items()):
        times: dict[str, list[float]] = {"teacher": [], "student": []}
        with torch.no_grad():
            for model in (teacher, student):  # warm-up
                for _ in range(3):
                    model(batch)
            for _ in range(args.repeats):
                for name, model in (("teacher", teacher), ("student", student)):
                    start = time.perf_counter()
                    model(batch)
                    times[name].append(1000 * (time.perf_counter() - start))
        med = {k: statistics.median(v) for k, v in times.items()}
        rows[f"batch{bs}"] = {"teacher_ms": round(med["teacher"], 3),
                              "student_ms": round(med["student"], 3),
                              "speedup": round(med["teacher"] / med["student"], 1),
                              "tokens": int(batch["input_ids"].shape[1])}
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
