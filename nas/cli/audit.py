"""``nas audit EXPERIMENT.yaml``: does the method's proxy rank candidates like full
training? (:mod:`evaluators.audit`; the method provides the proxy and full evaluators.)"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from nas.cli.common import emit, positive_int, seed_int

#: ``--select``'s choices (evaluators.audit.SELECTIONS; written out so that the parser
#: imports no evaluator)
SELECTIONS = ("params", "latency-spread")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit", help="rank agreement of a method's proxy with stand-alone training",
        description="Score candidates spread over the space's parameter counts (or, with "
                    "--select latency-spread, over its predicted batch-1 latency) with the "
                    "method's proxies (EfficientBERT: with and without warm-up; compress: "
                    "inherited-kd and the blockwise table) and with its full retrain; "
                    "report Kendall τ and Spearman ρ with bootstrap 95% intervals, a scatter "
                    "plot and the steps an inherited candidate needs to reach the scratch "
                    "candidate's final KD loss.")
    p.add_argument("config", help="experiment YAML, e.g. experiments/efficientbert_sst2.yaml")
    p.add_argument("--run-dir", help="where the audit goes (default runs/<name>_audit)")
    p.add_argument("--candidates", "--n", type=positive_int, default=12, metavar="N",
                   help="how many architectures (default 12)")
    p.add_argument("--select", choices=SELECTIONS, default="params",
                   help="params: one at each of N parameter-count quantiles (default); "
                        "latency-spread: N spread evenly in log predicted batch-1 latency "
                        "over a random pool, their span reported (method compress asks >= 10x)")
    p.add_argument("--bootstrap", type=positive_int, default=1000, metavar="B",
                   help="bootstrap resamples for the intervals (default 1000)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the candidates and bootstrap")
    p.add_argument("--noise-seeds", type=int, default=2, metavar="K",
                   help="score the middle candidate again with K other seeds and warn when "
                        "the candidates spread less than that seed noise (default 2; 0: skip)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting of the YAML (as for `nas run`)")
    p.add_argument("--data-dir", help="data folder (default $NAS_DATA_DIR)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted audit")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_audit)


def cmd_audit(args: argparse.Namespace) -> int:
    from evaluators.audit import audit_lines, run_audit
    from nas.methods import RunOptions, load_experiment
    from nas.rundir import run_folder

    method, config = load_experiment(args.config, args.set)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    run_dir = run_folder(args.run_dir, Path("runs") / f"{config.name}_audit")
    options = RunOptions(run_dir=run_dir, data_dir=args.data_dir, resume=args.resume,
                         progress=not args.no_progress)
    from nas.device import use_device

    # on the experiment's device, as `nas run` would be (a method config without one: auto)
    with use_device(getattr(config, "device", "auto"), getattr(config, "precision", "fp32")):
        parts = method.audit_parts(config, options)
        summary = run_audit(parts, args.candidates, args.seed, args.bootstrap,
                            args.noise_seeds, select=args.select)
    emit(args, summary, "\n".join(audit_lines(summary)) + f"\n\nwritten: {run_dir}/audit.md")
    return 0
