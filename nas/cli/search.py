"""``nas search CONFIG.yaml`` and ``nas report RUN_DIR``."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from nas.cli.common import emit
from nas.errors import NasError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("search", help="run an experiment YAML end to end")
    p.add_argument("config", help="experiment YAML, e.g. experiments/adabert_sst2.yaml")
    p.add_argument("--run-dir", help="where results go (default runs/<name>)")
    p.add_argument("--data-dir", help="data folder (default $NAS_DATA_DIR)")
    p.add_argument("--searcher", default="differentiable", choices=["differentiable", "random"],
                   help="random: retrain random architectures of the space with the same recipe")
    p.add_argument("--random-sample", type=int, metavar="I",
                   help="with --searcher random: retrain only sample I (0-based) and keep the "
                        "others finished so far; run one process per sample to use more "
                        "cores")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    p = subparsers.add_parser("report", help="teacher vs searched vs random: table and plots")
    p.add_argument("run_dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_report)


def cmd_search(args: argparse.Namespace) -> int:
    from nas.recipes.adabert import load_config, run_adabert

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    config = load_config(args.config)
    if args.random_sample is not None and args.searcher != "random":
        raise NasError("--random-sample needs --searcher random")
    run_dir = Path(args.run_dir or Path("runs") / config.name)
    # the random baseline adds a stage to an existing run: no --resume needed for that
    resume = args.resume or (args.searcher == "random" and (run_dir / "config.yaml").is_file())
    metrics = run_adabert(config, run_dir, data_dir=args.data_dir, searcher=args.searcher,
                          resume=resume, progress=not args.no_progress,
                          random_sample=args.random_sample)
    emit(args, metrics, f"done: {run_dir} (nas report {run_dir})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from nas.report import write_report

    text, data = write_report(args.run_dir)
    emit(args, data, text)
    return 0


