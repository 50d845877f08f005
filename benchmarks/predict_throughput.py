"""Prediction at volume: sentences per second of ``nas.runtime.load(DIR).predict(list)``
on one thread, with torch and with ONNX Runtime.

Run: ``OMP_NUM_THREADS=1 NAS_DATA_DIR=... python benchmarks/predict_throughput.py DIR
[--sentences 1821] [--batch-sizes 1,64] [--repeats 3]``, where ``DIR`` is an export with
``model.onnx`` (``nas export --run RUN_DIR --format onnx``; a smoke run's export is enough).

Steps: the SST-2 test sentences (the first ``--sentences``; the file of
``nas.data.load_task("sst2", "test")``) are scored by ``predict`` at each batch size, on
each runtime, one intra-op thread (``load(DIR, runtime, threads=1)``), after one untimed
pass over the first batch; each pass is timed end to end (tokenising, grouping by length,
the forward passes, the answers as dictionaries: what a caller gets), and the median of
``--repeats`` passes is reported as sentences per second of the wall clock and per
second of the process's CPU time (one thread: what it does with a core to itself, the
figure to read on a shared machine). Batch size 1 is the
single-text path's rate without the process start-up of ``nas predict``. The runtimes'
labels are compared (they agree up to float rounding). Record the printed lines in
``benchmarks/RESULTS.md`` and ``docs/exports.md`` with the command and the commit.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", help="an export directory with model.onnx")
    ap.add_argument("--sentences", type=int, default=1821,
                    help="how many SST-2 test sentences (default: all 1,821)")
    ap.add_argument("--batch-sizes", default="1,64", help="comma-separated (default 1,64)")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per setting")
    args = ap.parse_args()

    import torch

    from nas.data import load_task
    from nas.runtime import load

    torch.set_num_threads(1)
    texts = list(load_task("sst2", "test").texts_a[: args.sentences])
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    labels: dict[str, list[str]] = {}
    print(f"{args.directory}: {len(texts)} SST-2 test sentences, 1 thread, median of "
          f"{args.repeats} passes (torch {torch.__version__})")
    for runtime in ("torch", "onnx"):
        model = load(args.directory, runtime, threads=1)
        for bs in sizes:
            model.predict(texts[:bs], batch_size=bs)  # untimed: first-call costs
            times, cpu = [], []
            for _ in range(args.repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                answers = model.predict(texts, batch_size=bs)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            labels.setdefault(runtime, [a["label"] for a in answers])
            median = statistics.median(times)
            # per CPU-second: what one thread does when it has a core to itself (the wall
            # clock rate is lower on a shared machine)
            print(f"{runtime:>5}  batch {bs:>3}: {len(texts) / median:8.1f} sentences/s  "
                  f"{len(texts) / statistics.median(cpu):8.1f} per CPU-s  (passes "
                  f"{', '.join(f'{t:.2f}' for t in times)} s)")
    same = sum(a == b for a, b in zip(labels["torch"], labels["onnx"], strict=True))
    print(f"labels: torch and onnx agree on {same} of {len(texts)}")


if __name__ == "__main__":
    main()
