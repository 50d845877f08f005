"""Re-time a finished AdaBERT run's teacher and searched student side by side.

Run: ``python experiments/adabert_latency.py RUN_DIR [--repeats 30]``. The teacher (in the
engine's ``bert`` design, as the run now times it) and the exported student are timed by
the engine's one protocol (:func:`nas.measure.paired_speedups`: interleaved rounds on the
same batches, the run's report split at batch 1 and 32 and its median token length, one
CPU thread, PyTorch fp32), so a busy machine slows both alike; prints the medians, the
speed-up and its interquartile range.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nas.data import iter_batches, load_task, report_split
from nas.hf import load_teacher_as_design
from nas.measure import median_length_batches, paired_speedups
from nas.runtime import load
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
    _, teacher = load_teacher_as_design(metrics["teacher"]["model_dir"])
    with torch.no_grad():
        timed = paired_speedups(teacher.eval(), exported.network.eval(), latency_batches,
                                args.repeats)
    for bs, batch in latency_batches.items():
        timed[f"batch{bs}"]["tokens"] = int(batch["input_ids"].shape[1])
    print(json.dumps(timed))


if __name__ == "__main__":
    main()
