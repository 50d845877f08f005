"""fp32 against int8 ONNX Runtime: file size, agreement and accuracy on the SST-2 test
sentences, and batch-1 one-thread latency measured interleaved in one process.

Run: ``OMP_NUM_THREADS=1 NAS_DATA_DIR=... python benchmarks/int8_onnx.py FP32_DIR INT8_DIR
[--sentences 1821] [--tokens 24] [--rounds 30] [--calls 20]``, where ``FP32_DIR`` is an
export with an fp32 ``model.onnx`` (``nas export ... --format onnx``) and ``INT8_DIR`` the
same model with ``--quantize int8``.

Steps: both ``model.onnx`` files are loaded with one intra-op thread
(``nas.runtime.load(DIR, "onnx", threads=1)``); the first ``--sentences`` SST-2 test
sentences are predicted by each (``predict``: batches of one token length, no padding)
and compared with each other and with the labels; then, ``--rounds`` times, each graph
runs ``--calls`` times on one example of ``--tokens`` random ids (full mask), after two
untimed calls, alternating graphs so that a change in the machine's load hits both alike
(:func:`nas.timing.time_call`). The latency is the median of the rounds' medians, the
spread their interquartile range. Record the printed lines in ``benchmarks/RESULTS.md``
and ``docs/exports.md`` with the command and the commit.
"""

from __future__ import annotations

import argparse
import functools
import statistics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fp32", help="an export whose model.onnx is fp32")
    ap.add_argument("int8", help="the same model exported with --quantize int8")
    ap.add_argument("--sentences", type=int, default=1821,
                    help="how many SST-2 test sentences (default: all 1,821)")
    ap.add_argument("--tokens", type=int, default=24, help="tokens per timed example")
    ap.add_argument("--rounds", type=int, default=30, help="alternations of the two graphs")
    ap.add_argument("--calls", type=int, default=20, help="timed calls per graph and round")
    args = ap.parse_args()

    from pathlib import Path

    from nas.data import load_task
    from nas.runtime import load, random_batch
    from nas.timing import time_call

    models = {"fp32": load(args.fp32, "onnx", threads=1),
              "int8": load(args.int8, "onnx", threads=1)}
    data = load_task("sst2", "test")
    texts = list(data.texts_a[:args.sentences])
    labels = list(data.labels[:args.sentences])
    answers = {}
    for name, model in models.items():
        names = model.labels
        answers[name] = [names.index(a["label"]) for a in model.predict(texts)]
        size = (Path(model.directory) / "model.onnx").stat().st_size
        accuracy = sum(p == y for p, y in zip(answers[name], labels, strict=True)) / len(texts)
        print(f"{name}: model.onnx {size / 1e6:.1f} MB, test accuracy {100 * accuracy:.2f} "
              f"on {len(texts)} sentences")
    same = sum(a == b for a, b in zip(answers["fp32"], answers["int8"], strict=True))
    print(f"agreement: {same}/{len(texts)} ({100 * same / len(texts):.2f}%)")
    batch = random_batch(models["fp32"], 1, args.tokens)
    medians: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            timing = time_call(functools.partial(model, batch), warmup=2, repeats=args.calls)
            medians[name].append(timing.median_ms)
    for name, values in medians.items():
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
        print(f"{name}: batch 1, {args.tokens} tokens, 1 thread: median {median:.3f} ms, "
              f"IQR {q3 - q1:.3f} ms ({args.rounds} rounds x {args.calls} calls, interleaved)")
    ratio = statistics.median(medians["fp32"]) / statistics.median(medians["int8"])
    print(f"speed-up int8 over fp32: {ratio:.2f}x")


if __name__ == "__main__":
    main()
