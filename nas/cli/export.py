"""``nas export``, ``nas predict`` and ``nas bench``: a thin layer over nas.export and nas.runtime.

    nas export --space NAME [--arch A] [--weights CKPT] -o DIR [--format native|hf|onnx]
    nas predict DIR "text" ["second text"] [--runtime torch|onnx] [--json]
    nas bench DIR [--batch-sizes 1,32] [--seq-len 128] [--runtime torch|onnx] [--json]
"""

from __future__ import annotations

import argparse

from nas.cli.common import (
    add_space_config_option,
    arch_from_args,
    emit,
    non_negative_int,
    positive_int,
    space_from_args,
)
from nas.errors import NasError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help="write a standalone model directory (native, hf or onnx)")
    p.add_argument("--space", help="registered space name (nas spaces list); not with --run")
    p.add_argument("--run", metavar="RUN_DIR",
                   help="export a trial of the run folder's multi-trial search instead "
                        "(default output RUN_DIR/exports/trial<N>)")
    p.add_argument("--trial", default="best", metavar="N|best",
                   help="with --run: the trial number, or best (single-objective studies)")
    p.add_argument("--arch", help="architecture JSON file or inline JSON (default: the default)")
    p.add_argument("--weights", help="checkpoint of the child or of the supernet "
                                     "(.safetensors or torch file); default: fresh weights")
    p.add_argument("-o", "--output", help="directory to write (required without --run)")
    p.add_argument("--format", default="native", choices=("native", "hf", "onnx"),
                   help="native (config.json + model.safetensors), hf (transformers; bert and "
                        "mobilebert families) or onnx (native + model.onnx)")
    p.add_argument("--labels", help="comma-separated label names (default LABEL_0,...)")
    p.add_argument("--tokenizer", help="directory with the tokenizer files (default: the "
                                       "MiniLM teacher's, when the vocabulary fits)")
    p.add_argument("--max-length", type=positive_int, default=128,
                   help="tokenizer truncation length")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a previous export in the output directory completely")
    add_space_config_option(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_export)

    p = subparsers.add_parser("predict", help="label and probabilities of an exported classifier "
                                       "(a tagging model: intent and slot spans)")
    p.add_argument("directory")
    p.add_argument("text")
    p.add_argument("text_b", nargs="?", help="second sentence of a pair")
    p.add_argument("--runtime", default="torch", choices=("torch", "onnx"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_predict)

    p = subparsers.add_parser("bench", help="CPU latency (median, p90) and throughput")
    p.add_argument("directory")
    p.add_argument("--batch-sizes", default="1,32", help="comma-separated (default 1,32)")
    p.add_argument("--seq-len", type=positive_int, default=128,
                   help="tokens per example (at most the model's positions)")
    p.add_argument("--runtime", default="torch", choices=("torch", "onnx"))
    p.add_argument("--repeats", type=positive_int, default=10, help="timed runs per batch size")
    p.add_argument("--warmup", type=non_negative_int, default=3, help="untimed runs per batch size")
    p.add_argument("--threads", type=positive_int,
                   help="intra-op threads (default: the runtime's own; on a busy machine 1 is "
                        "often fastest)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)


def cmd_export(args: argparse.Namespace) -> int:
    from nas.export import export

    if args.run is not None:
        return _export_trial(args)
    if args.space is None or args.output is None:
        raise NasError("nas export needs --space and -o DIR (or --run RUN_DIR to export a "
                       "trial of a multi-trial search)")
    space = space_from_args(args)
    arch = arch_from_args(space, args.arch)
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    out = export(space, arch, args.output, weights=args.weights, fmt=args.format,
                 labels=labels, tokenizer=args.tokenizer, max_length=args.max_length,
                 overwrite=args.overwrite)
    files = sorted(p.name for p in out.iterdir())
    emit(args, {"directory": str(out), "space": space.name, "arch_id": arch.id,
                "format": args.format, "files": files},
         f"exported {space.name} arch {arch.id} ({args.format}) to {out}: {', '.join(files)}")
    return 0


def _export_trial(args: argparse.Namespace) -> int:
    """``nas export --run RUN_DIR [--trial N|best]``: the run's study knows the space, the
    architecture, the trained weights and the tokenizer."""
    from searchers.results import export_trial

    clashing = [flag for flag, value in (("--space", args.space), ("--arch", args.arch),
                                         ("--weights", args.weights), ("--labels", args.labels),
                                         ("--tokenizer", args.tokenizer)) if value]
    if clashing:
        raise NasError(f"{clashing[0]} does not go with --run: the study records it")
    out, trial = export_trial(args.run, args.trial, args.output, fmt=args.format,
                              overwrite=args.overwrite)
    files = sorted(p.name for p in out.iterdir())
    arch_id = trial.user_attrs["arch_id"]
    emit(args, {"directory": str(out), "trial": trial.number, "arch_id": arch_id,
                "values": trial.values, "format": args.format, "files": files},
         f"exported trial {trial.number} (arch {arch_id}, values "
         f"{[round(v, 4) for v in trial.values]}) to {out}: {', '.join(files)}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from nas.runtime import load

    model = load(args.directory, args.runtime)
    result = model.predict([args.text], [args.text_b] if args.text_b is not None else None)[0]
    if "slots" in result:  # a joint intent + slot model: the intent, then one line per slot
        slots = [f"  {s['slot']}: {s['text']}" for s in result["slots"]] or ["  (no slots)"]
        emit(args, result, "\n".join(
            [f"intent\t{result['intent']}\t{result['intent_probability']:.4f}", *slots]))
        return 0
    probs = "  ".join(f"{k}={v:.4f}" for k, v in result["probabilities"].items())
    emit(args, result, f"{result['label']}\t{probs}")
    return 0


def _positive_ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise NasError(f"{flag} expects comma-separated positive integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise NasError(f"{flag} expects comma-separated positive integers, got {text!r}")
    return values


def cmd_bench(args: argparse.Namespace) -> int:
    from nas.runtime import benchmark, load

    sizes = _positive_ints(args.batch_sizes, "--batch-sizes")
    model = load(args.directory, args.runtime, args.threads)
    rows = benchmark(model, sizes, args.seq_len, args.repeats, args.warmup)
    lines = [f"{args.directory} ({args.runtime}, sequence length {args.seq_len}, "
             f"{rows[0]['threads']} threads):"]
    lines += [f"  batch {r['batch_size']:>4}: median {r['median_ms']:8.2f} ms  p90 "
              f"{r['p90_ms']:8.2f} ms  {r['throughput_per_s']:9.1f} sequences/s" for r in rows]
    emit(args, {"directory": str(args.directory), "results": rows}, "\n".join(lines))
    return 0
