"""The teacher and every final point of a run in three runtimes: PyTorch fp32, ONNX Runtime
fp32 and ONNX Runtime dynamic int8; latency at batch 1 and 32, accuracy on the clean SST-2
test sentences, agreement of each runtime with PyTorch fp32, file size, and the speed-ups
against the teacher in PyTorch fp32 and against the teacher in the same runtime.

Run: ``OMP_NUM_THREADS=1 NAS_DATA_DIR=... python benchmarks/runtime_table.py RUN_DIR
[--repeats 20] [--tokens 24]`` on a run whose final points were exported as int8 ONNX
(``final.export: {format: onnx, quantize: int8}``), so that ``RUN/teacher_export`` holds
the teacher exported the same way (:mod:`nas.shipped`).

Steps, per model (the teacher first, then ``RUN/final/<tag>/export`` in tag order): its
fp32 weights in PyTorch (:func:`nas.runtime.load_fp32`; the teacher in the engine's
``bert`` design, as every run times it), its fp32 ONNX graph (written again from those
weights into a temporary folder, :func:`nas.export.convert`), and its shipped int8 graph.
Each answers the 1,821 test sentences (batches of one token length, no padding). Then,
one thread, each runtime's model is timed against the teacher in the same runtime and
against the teacher in PyTorch fp32 by the one timing protocol
(:func:`nas.timing.time_pair`: interleaved rounds on the same batch of random ids at
``--tokens`` tokens). Record the printed table in ``docs/exports.md`` and
``benchmarks/RESULTS.md`` with the command and the commit.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any


def _accuracy(model: Any, texts: list[str], labels: list[int]) -> tuple[float, list[int]]:
    names = model.labels
    answers = [names.index(a["label"]) for a in model.predict(texts)]
    return 100 * sum(a == y for a, y in zip(answers, labels, strict=True)) / len(labels), answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a run folder with int8 ONNX exports and RUN/teacher_export")
    ap.add_argument("--repeats", type=int, default=20, help="interleaved rounds per pair")
    ap.add_argument("--tokens", type=int, default=24, help="tokens per timed example")
    args = ap.parse_args()

    import torch

    from nas.data import load_task
    from nas.export import convert
    from nas.runtime import load, load_fp32, random_batch, timed_callable
    from nas.shipped import TEACHER_EXPORT
    from nas.timing import time_pair

    torch.set_num_threads(1)
    run = Path(args.run)
    folders = {"teacher": run / TEACHER_EXPORT}
    folders.update({p.parent.name: p for p in sorted((run / "final").glob("*/export"))})
    data = load_task("sst2", "test")
    texts, labels = list(data.texts_a), list(data.labels)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        models: dict[str, dict[str, Any]] = {}
        for tag, folder in folders.items():
            fp32_onnx = convert(folder, Path(tmp) / tag, "onnx")
            models[tag] = {"torch-fp32": load_fp32(folder),
                           "onnx-fp32": load(fp32_onnx, "onnx", threads=1),
                           "onnx-int8": load(folder, "onnx", threads=1)}
            sizes = {"torch-fp32": (folder / "model.safetensors").stat().st_size,
                     "onnx-fp32": (fp32_onnx / "model.onnx").stat().st_size,
                     "onnx-int8": (folder / "model.onnx").stat().st_size}
            reference = None
            for runtime, model in models[tag].items():
                accuracy, answers = _accuracy(model, texts, labels)
                reference = answers if reference is None else reference
                same = sum(a == b for a, b in zip(answers, reference, strict=True))
                rows.append({"model": tag, "runtime": runtime, "accuracy": accuracy,
                             "agreement": 100 * same / len(texts), "mb": sizes[runtime] / 1e6})
        teacher = models["teacher"]
        base = timed_callable(teacher["torch-fp32"])
        for row in rows:
            model = models[row["model"]][row["runtime"]]
            student, same_runtime = timed_callable(model), timed_callable(
                teacher[row["runtime"]])
            itself = row["model"] == "teacher"  # against itself: 1x by definition
            for bs in (1, 32):
                batch = random_batch(model, bs, args.tokens)
                with torch.no_grad():
                    start = time_pair(base, student, [batch], args.repeats)
                    fair = start if row["runtime"] == "torch-fp32" else (
                        time_pair(same_runtime, student, [batch], args.repeats))
                row[f"ms{bs}"] = start.student.median_ms
                row[f"iqr{bs}"] = start.student.iqr_ms
                row[f"vs_fp32_{bs}"] = start.speedup
                row[f"vs_same_{bs}"] = 1.0 if itself else fair.speedup
                # the teacher in PyTorch fp32 timed against itself: no difference to tell
                alone = itself and row["runtime"] == "torch-fp32"
                row[f"noisy{bs}"] = (start.noisy and not alone) or (fair.noisy and not itself)
    print("| model | runtime | file MB | test acc (1,821) | agrees with its PyTorch fp32 | "
          "ms batch 1 | ms batch 32 | vs PyTorch-fp32 teacher (b1 / b32) | vs same-runtime "
          "teacher (b1 / b32) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        flag = " (noisy)" if r["noisy1"] or r["noisy32"] else ""
        print(f"| {r['model']} | {r['runtime']} | {r['mb']:.1f} | {r['accuracy']:.2f} | "
              f"{r['agreement']:.1f}% | {r['ms1']:.2f} ± {r['iqr1']:.2f} | "
              f"{r['ms32']:.1f} ± {r['iqr32']:.1f} | {r['vs_fp32_1']:.1f}× / "
              f"{r['vs_fp32_32']:.1f}× | {r['vs_same_1']:.2f}× / {r['vs_same_32']:.2f}×{flag} |")
    print(f"(one thread; {args.repeats} interleaved rounds per pair; random ids of "
          f"{args.tokens} tokens; ± is the interquartile range of the rounds)")


if __name__ == "__main__":
    main()
