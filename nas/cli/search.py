"""``nas run EXPERIMENT.yaml`` (alias ``nas search``) and ``nas report RUN_DIR``.

``nas run`` reads the experiment's ``method:``, looks the recipe up in the method
registry and runs it; the command knows no method by name.
"""

from __future__ import annotations

import argparse

from nas.cli.common import add_device_option, emit, positive_float, positive_int, runtime_device
from nas.errors import NasError


def _add_run_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str,
                    searcher_names: list[str]) -> None:
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument("config", help="experiment YAML, e.g. experiments/adabert_sst2.yaml")
    p.add_argument("--task", metavar="FILE|DIR|NAME",
                   help="run on this task instead of the file's task: a data file (CSV, TSV, "
                        "JSONL, Parquet), a saved datasets folder or a task name; --set "
                        "task.text=COLUMN and its siblings then name its columns")
    p.add_argument("--dry-run", action="store_true",
                   help="make the run's checks (refusing what the run would refuse), print "
                        "the resolved configuration, the data sizes (and what the caps cut), "
                        "the steps per training stage and an estimated wall time, then exit "
                        "without training or writing the run folder")
    p.add_argument("--run-dir", help="where results go (default runs/<name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting of the YAML, any dotted key, the value read as "
                        "YAML: --set retrain.epochs=1 --set data.max_train_examples=2000 "
                        "(repeatable; checked like the file; the run's config.yaml records "
                        "the result)")
    p.add_argument("--data-dir", help="data folder (default $NAS_DATA_DIR)")
    add_device_option(p, None, "every stage computes (the same as --set device=...; "
                               "mixed precision: --set precision=bf16|fp16)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE|MODULE",
                   help="a Python file or module imported first, e.g. a space of your own "
                        "(my_space.py registers it); repeatable, added to the file's "
                        "`plugins:`")
    p.add_argument("--searcher", metavar="NAME",
                   help="a registered searcher the method accepts, a plug-in's included "
                        "(default: the experiment's `searcher:`, else the method's own); "
                        f"built in: {', '.join(searcher_names)}; e.g. random: random "
                        "architectures trained with the same recipe; knapsack and "
                        "truncation: method compress only")
    study = p.add_argument_group("multi-trial searches (lanas, lamoo, tpe, nsga2, gp, random)")
    study.add_argument("--n-trials", type=positive_int, metavar="N",
                       help="evaluations in the study (default: the experiment's); on "
                            "--resume a larger N extends a finished study")
    study.add_argument("--timeout", type=positive_float, metavar="S",
                       help="start no new trial after S seconds")
    study.add_argument("--storage", metavar="URL",
                       help="where the study lives: a journal file (default RUN_DIR/"
                            "study.journal), sqlite:///FILE or postgresql+psycopg://USER@HOST/DB")
    study.add_argument("--workers", type=positive_int, default=1, metavar="N",
                       help="evaluate trials in N processes, one torch thread each")
    study.add_argument("--attach", action="store_true",
                       help="join the existing study in --storage as another worker, with a "
                            "run folder of its own")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run")
    p.add_argument("--break-lock", action="store_true",
                   help="take over the run directory's lock left by a process on another "
                        "host (make sure that run is over: two writers corrupt a run)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the final metrics as JSON")
    p.set_defaults(func=cmd_run)


def register(subparsers: argparse._SubParsersAction) -> None:
    from searchers.base import searcher_names  # torch-free: cheap parser

    # the names are help only: --searcher is checked once the experiment's plug-ins are
    # loaded (method.check_searcher), so a plug-in's searcher is found
    names = searcher_names()
    _add_run_parser(subparsers, "run", "run an experiment YAML end to end (any method)", names)
    _add_run_parser(subparsers, "search", "alias of `nas run`", names)

    p = subparsers.add_parser("report", help="teacher vs searched vs random: table and plots")
    p.add_argument("run_dir", help="a run directory written by `nas run`")
    p.add_argument("--json", action="store_true", help="print the report data as JSON")
    p.set_defaults(func=cmd_report)
    register_evaluate(subparsers)


def cmd_run(args: argparse.Namespace) -> int:
    from nas.methods import load_experiment, start_run

    overrides = [*args.set, *([f"device={args.device}"] if args.device else [])]
    method, config = load_experiment(args.config, overrides, plugins=args.plugin,
                                     task=args.task)
    # an experiment may name its searcher (`searcher: lanas`); --searcher overrides it
    run_dir, result = start_run(method, config, run_dir=args.run_dir, searcher=args.searcher,
                                dry_run=args.dry_run,
                                study=lambda searcher: _study_options(args, searcher),
                                data_dir=args.data_dir, resume=args.resume,
                                progress=not args.no_progress, break_lock=args.break_lock)
    if args.dry_run:
        from recipes.plan import describe

        emit(args, result, describe(result))
        return 0
    emit(args, result, f"done: {run_dir} (nas report {run_dir})")
    return 0


def _study_options(args: argparse.Namespace, searcher: str | None) -> object | None:
    """The multi-trial flags as :class:`searchers.loop.StudyOptions` (``None`` when none
    is given); they need a multi-trial searcher."""
    given = [flag for flag, value in (("--n-trials", args.n_trials), ("--timeout", args.timeout),
                                      ("--storage", args.storage), ("--attach", args.attach),
                                      ("--workers", args.workers != 1)) if value]
    if not given:
        return None
    from searchers.base import SEARCHERS
    from searchers.loop import StudyOptions

    # a one-shot or planned searcher (compress's knapsack) runs no study of its own
    if searcher is None or searcher not in SEARCHERS or SEARCHERS.kind_of(searcher) != \
            "multi-trial":
        raise NasError(f"{given[0]} needs a multi-trial searcher (--searcher lanas, lamoo, "
                       f"tpe, nsga2, gp or random), not {searcher}")
    # --storage is opened by the run's checks (Method.validate), which the dry run makes too
    return StudyOptions(n_trials=args.n_trials, timeout=args.timeout, storage=args.storage,
                        workers=args.workers, attach=args.attach)


def cmd_report(args: argparse.Namespace) -> int:
    from nas.report import write_report

    text, data = write_report(args.run_dir)
    emit(args, data, text)
    return 0


def register_evaluate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("evaluate", help="re-score a saved model on a task split",
                              description="Re-score a run's export or an export directory. "
                                          "The default split is the task's report split "
                                          "(test when it has one, e.g. SST-2's clean "
                                          "sentence-level test set).")
    p.add_argument("path", help="a run directory (nas run) or an export directory")
    p.add_argument("--split", help="train, validation (alias dev) or test (default: test "
                                   "when the task has it)")
    p.add_argument("--task", help="task name or data file (default: the one the run was "
                                  "made for)")
    p.add_argument("--data-dir", help="data folder (default $NAS_DATA_DIR)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="examples per forward pass")
    p.add_argument("--label-map", metavar="DATA=MODEL,...",
                   help="match the data's label names to the model's (e.g. "
                        "neg=negative,pos=positive); labels always match by name, never by "
                        "position")
    p.add_argument("--runtime", default="auto", choices=("auto", "torch", "onnx"),
                   help="the runtime that runs the export; auto (default): onnxruntime for "
                        "an int8 export, else torch")
    add_device_option(p, "auto", "the torch runtime computes")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from nas.evaluate import evaluate_saved, parse_label_map

    result = evaluate_saved(args.path, task=args.task, split=args.split,
                            data_dir=args.data_dir, batch_size=args.batch_size,
                            runtime=args.runtime, label_map=parse_label_map(args.label_map),
                            device=runtime_device(args))
    values = ", ".join(f"{k} {100 * v:.2f}" for k, v in result["metrics"].items())
    count = (f"{result['examples']} of {result['of_examples']} examples: the seeded sample "
             "the run scored" if "of_examples" in result else f"{result['examples']} examples")
    emit(args, result, f"{result['task']}/{result['split']} ({result['file']}, {count}): "
                       f"{values}")
    return 0
