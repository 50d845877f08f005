"""``nas export``, ``nas predict`` and ``nas bench``: a thin layer over nas.export and nas.runtime.

    nas export --space NAME [--arch A] [--weights CKPT|HF_DIR | --random-init] -o DIR
               [--format native|hf|onnx]
    nas export --run RUN_DIR [--trial N|best] [--format native|hf|onnx] [--quantize int8]
               [--trim-vocab]
    nas predict DIR "text" ["second text"] [--runtime auto|torch|onnx] [--json]
    nas predict DIR --file texts.txt|data.csv [--text-column C] [--pair-column C2]
                [--batch-size N] [--json]
    nas bench DIR [--batch-sizes 1,32] [--seq-len 128] [--runtime auto|torch|onnx]
              [--against TEACHER_DIR] [--json]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from nas.cli.common import (
    add_device_option,
    add_space_config_option,
    arch_from_args,
    check_output,
    emit,
    non_negative_int,
    parse_space_config,
    positive_float,
    positive_int,
    runtime_device,
)
from nas.errors import NasError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help="write a standalone model directory (native, hf or onnx)")
    p.add_argument("--space", help="registered space name (nas spaces list); default: the one "
                                   "--arch or a Hugging Face --weights folder names; not with "
                                   "--run")
    p.add_argument("--run", metavar="RUN_DIR",
                   help="export a run's result: its searched model (RUN_DIR/export), or with "
                        "--trial a trial of its multi-trial search (default output "
                        "RUN_DIR/exports/<format> or RUN_DIR/exports/trial<N>)")
    p.add_argument("--trial", metavar="N|best",
                   help="with --run: the trial number, or best (single-objective studies); "
                        "default: the run's searched model, else the best trial")
    p.add_argument("--arch", help="architecture JSON file or inline JSON (a run's "
                                  "derived_arch.json brings its space and space_config); "
                                  "default: the space's default")
    p.add_argument("--weights", help="checkpoint of the child or of the supernet (.safetensors "
                                     "or torch file), or a Hugging Face checkpoint folder of "
                                     "the same design (e.g. a cached fine-tuned teacher)")
    p.add_argument("--random-init", action="store_true",
                   help="export freshly initialised weights (only for testing the pipeline; "
                        "recorded in config.json, and nas predict warns)")
    p.add_argument("-o", "--output", help="directory to write (required without --run)")
    p.add_argument("--format", default="native", choices=("native", "hf", "onnx"),
                   help="native (config.json + model.safetensors + the runtime as transformers "
                        "remote code), hf (stock transformers classes for the bert and "
                        "mobilebert families, remote code for the others) or onnx (native + "
                        "model.onnx, its weights inside; with --run, a stock transformers "
                        "result gets model.onnx beside it)")
    p.add_argument("--quantize", choices=("int8",),
                   help="with --format onnx: model.onnx becomes ONNX Runtime's dynamic int8 "
                        "graph (optimised where BERT-shaped, pre-processed, per-channel); "
                        "with --run, compared with fp32 on dev and recorded")
    p.add_argument("--max-int8-drop", type=positive_float, metavar="POINTS",
                   help="with --run --quantize int8: the dev points the int8 model may lose "
                        "before the most sensitive layers stay fp32 (default: the run's "
                        "final.export.max_int8_drop, else 0.3)")
    p.add_argument("--trim-vocab", action="store_true",
                   help="with --run: keep only the word pieces of the task's train texts (and "
                        "the special tokens) in the tokenizer and the embedding rows "
                        "(WordPiece tokenizers; a stock folder may keep --format hf); the "
                        "report split is scored before and after, in config.json")
    p.add_argument("--labels", help="comma-separated label names (default: the checkpoint's, "
                                    "else LABEL_0,...)")
    p.add_argument("--tokenizer", help="directory with the tokenizer files (default: the "
                                       "checkpoint folder's, else the MiniLM teacher's when the "
                                       "vocabulary fits)")
    p.add_argument("--max-length", type=positive_int,
                   help="tokenizer truncation length, as the model was trained (default: the "
                        "fine-tuned teacher's, else 128)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a previous export in the output directory completely")
    add_space_config_option(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    p.set_defaults(func=cmd_export)

    p = subparsers.add_parser("predict", help="label and probabilities of an exported classifier "
                                       "(a tagging model: intent and slot spans), for one text "
                                       "or every text of a file")
    p.add_argument("directory", help="an export directory (nas export)")
    p.add_argument("text", nargs="?", help="the text to classify or tag (or --file)")
    p.add_argument("text_b", nargs="?", help="second sentence of a pair")
    p.add_argument("--file", metavar="FILE",
                   help="predict every text of FILE, streamed in file order: one text per line "
                        "(blank lines skipped), or a .csv, .tsv or .jsonl table; one answer "
                        "per text on stdout (JSON Lines with --json)")
    p.add_argument("--text-column", metavar="C",
                   help="with a table --file: the text column (default: text, else the only "
                        "column)")
    p.add_argument("--pair-column", metavar="C2",
                   help="with a table --file: the second text of a pair (default: text_pair "
                        "when the model reads pairs)")
    # default None: nas.runtime.PREDICT_BATCH_SIZE, read when the command runs (the parser
    # must not import torch)
    p.add_argument("--batch-size", type=positive_int, metavar="N",
                   help="texts per forward pass (default 64); each batch holds texts of one "
                        "token length, so answers do not depend on it")
    p.add_argument("--runtime", default="auto", choices=("auto", "torch", "onnx"),
                   help="run with torch or onnxruntime (an onnx export); auto (default): "
                        "onnxruntime for an int8 export, which has no torch model, else torch")
    add_device_option(p, "auto", "the torch runtime computes")
    p.add_argument("--threads", type=positive_int,
                   help="intra-op threads (default: the runtime's own)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (shown on stderr for a --file of more than one batch)")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON document (--file: one per line)")
    p.set_defaults(func=cmd_predict)

    p = subparsers.add_parser("bench", help="latency (median, IQR, p90) and throughput, on the "
                                            "CPU or, with --device cuda, a GPU")
    p.add_argument("directory", help="an export directory (nas export)")
    p.add_argument("--batch-sizes", default="1,32", help="comma-separated (default 1,32)")
    p.add_argument("--seq-len", type=positive_int, default=128,
                   help="tokens per example (at most the model's positions)")
    p.add_argument("--runtime", default="auto", choices=("auto", "torch", "onnx"),
                   help="run with torch or onnxruntime (an onnx export); auto (default): "
                        "onnxruntime for an int8 export, which has no torch model, else torch")
    p.add_argument("--repeats", type=positive_int, default=10, help="timed runs per batch size")
    p.add_argument("--warmup", type=non_negative_int, default=3, help="untimed runs per batch size")
    p.add_argument("--threads", type=positive_int,
                   help="intra-op threads (default: the runtime's own; on a busy machine 1 is "
                        "often fastest)")
    add_device_option(p, "cpu", "the torch runtime computes; a GPU is timed with CUDA events")
    p.add_argument("--against", metavar="TEACHER_DIR",
                   help="also time the model against this one (a teacher's folder or another "
                        "export) in interleaved rounds on the same batches, in the same "
                        "runtime, and print the speed-up with its interquartile range")
    p.add_argument("--json", action="store_true", help="print the results as one JSON document")
    p.set_defaults(func=cmd_bench)


def _arch_document(text: str | None) -> dict[str, Any]:
    """The ``--arch`` JSON when it is a file or inline object naming its space (a run's
    ``derived_arch.json``: ``space``, ``choices``, ``space_config``); else ``{}``."""
    if text is None:
        return {}
    stripped = text.lstrip()
    try:
        data = json.loads(text if stripped.startswith("{") else Path(text).read_text(
            encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # arch_from_args names the problem
    return data if isinstance(data, dict) and "choices" in data else {}


def cmd_export(args: argparse.Namespace) -> int:
    from nas.export import export, hf_checkpoint_info, is_hf_checkpoint
    from nas.space import get_space

    # a file in the way or a missing parent fails before any weights load; a folder
    # holding a previous export is nas.export.check_target's to judge (--overwrite)
    check_output(args.output, "dir")
    from nas.quantize import check_quantize

    check_quantize(args.quantize, args.format)
    if args.max_int8_drop is not None and args.quantize is None:
        raise NasError("--max-int8-drop goes with --quantize int8")
    if args.trim_vocab and args.run is None:
        raise NasError("--trim-vocab goes with --run RUN_DIR (the run's task gives the train "
                       "texts whose word pieces are kept)")
    if args.run is not None:
        return _export_run(args)
    doc = _arch_document(args.arch)
    info = hf_checkpoint_info(args.weights) if args.weights and is_hf_checkpoint(args.weights) \
        else {}
    name = args.space or doc.get("space") or info.get("space")
    if name is None or args.output is None:
        raise NasError("nas export needs --space (or an --arch file / Hugging Face --weights "
                       "folder that names it) and -o DIR; or --run RUN_DIR to export a run's "
                       "result")
    base = doc.get("space_config") if doc.get("space") in (None, name) else None
    if base is None and info.get("space") == name:
        base = info["space_config"]
    if base is not None and not isinstance(base, dict):
        raise NasError(f"{args.arch}: space_config must be a JSON object")
    space = get_space(name, **{**(base or {}), **parse_space_config(args.config)})
    arch = arch_from_args(space, args.arch)
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else info.get("labels")
    out = export(space, arch, args.output, weights=args.weights, fmt=args.format,
                 labels=labels, tokenizer=args.tokenizer,
                 max_length=args.max_length or info.get("max_length") or 128,
                 task=info.get("task"), overwrite=args.overwrite, random_init=args.random_init,
                 quantize=args.quantize)
    files = sorted(p.name for p in out.iterdir())
    emit(args, {"directory": str(out), "space": space.name, "arch_id": arch.id,
                "format": args.format, "files": files, "random_init": args.random_init},
         f"exported {space.name} arch {arch.id} ({args.format}) to {out}: {', '.join(files)}")
    return 0


def _export_run(args: argparse.Namespace) -> int:
    """``nas export --run RUN_DIR [--trial N|best]``: the run knows the space, the
    architecture, the trained weights and the tokenizer."""
    clashing = [flag for flag, value in (("--space", args.space), ("--arch", args.arch),
                                         ("--weights", args.weights), ("--labels", args.labels),
                                         ("--tokenizer", args.tokenizer),
                                         ("--random-init", args.random_init),
                                         ("--max-length", args.max_length)) if value]
    if clashing:
        raise NasError(f"{clashing[0]} does not go with --run: the run records it")
    searched = Path(args.run) / "export"
    if args.trial is None and (searched / "config.json").is_file():
        return _convert_run(args, Path(args.run))
    from searchers.results import export_trial

    if args.quantize or args.trim_vocab:
        flag = "--quantize" if args.quantize else "--trim-vocab"
        raise NasError(f"{flag} goes with a run's result folders, not with --trial (a "
                       "trial's weights are not the final retrain's); drop --trial")
    out, trial = export_trial(args.run, args.trial or "best", args.output, fmt=args.format,
                              overwrite=args.overwrite)
    files = sorted(p.name for p in out.iterdir())
    arch_id = trial.user_attrs["arch_id"]
    emit(args, {"directory": str(out), "trial": trial.number, "arch_id": arch_id,
                "values": trial.values, "format": args.format, "files": files},
         f"exported trial {trial.number} (arch {arch_id}, values "
         f"{[round(v, 4) for v in trial.values]}) to {out}: {', '.join(files)}")
    return 0


def _convert_run(args: argparse.Namespace, run: Path) -> int:
    """The run's searched model (``RUN/export``) and every final point
    (``RUN/final/<tag>/export``) converted to ``--format`` (int8 with ``--quantize``,
    compared with fp32 on the run's dev)."""
    from nas.export import convert
    from nas.quantize import run_dev, run_max_drop
    from nas.rundir import RunDir
    from nas.vocab_trim import run_trim

    name = args.format + (f"-{args.quantize}" if args.quantize else "") + (
        "-trimmed" if args.trim_vocab else "")
    sources = [(run / "export", Path(args.output) if args.output else run / "exports" / name)]
    sources += [(folder, folder.parent / "exports" / name)
                for folder in sorted((run / "final").glob("*/export"))
                if (folder / "config.json").is_file()]
    metrics = RunDir(run).load_json("metrics.json")
    keywords: dict[str, Any] = {}
    if args.quantize:
        keywords = {"quantize": args.quantize, "max_int8_drop": args.max_int8_drop
                    if args.max_int8_drop is not None else run_max_drop(run)}
    done = []
    for src, out in sources:
        dev = run_dev(run, src) if args.quantize else None
        trim = run_trim(run, src) if args.trim_vocab else None
        convert(src, out, args.format, overwrite=args.overwrite, metrics=metrics, dev=dev,
                trim=trim, **keywords)
        what = ("the run's searched model" if src == run / "export"
                else f"final point {src.parent.name}")
        done.append({"directory": str(out), "source": str(src), "what": what,
                     "files": sorted(p.name for p in out.iterdir())})
    emit(args, {**done[0], "format": args.format, "quantize": args.quantize,
                "trim_vocab": args.trim_vocab,
                "final": done[1:]},
         "\n".join(f"exported {d['what']} ({name}) to {d['directory']}: "
                   f"{', '.join(d['files'])}" for d in done))
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from nas.runtime import load

    if (args.file is None) == (args.text is None):
        raise NasError("nas predict needs a text or --file FILE (not both); e.g. nas predict "
                       "DIR \"a fine film\" or nas predict DIR --file texts.txt")
    if args.file is None and (args.text_column or args.pair_column):
        raise NasError("--text-column and --pair-column go with --file (a table to read)")
    model = load(args.directory, args.runtime, args.threads, device=runtime_device(args))
    if args.file is not None:
        return _predict_file(args, model)
    texts_b = [args.text_b] if args.text_b is not None else None
    model.check_texts([args.text], texts_b)  # before any warning: a refusal is one line
    _warn_random(args, model)
    result = model.predict([args.text], texts_b)[0]
    emit(args, result, _answer_text(result, one_line=False))
    return 0


def _warn_random(args: argparse.Namespace, model: Any) -> None:
    if model.random_init:
        print(f"warning: {args.directory} holds untrained, randomly initialised weights "
              "(exported with --random-init): its answers mean nothing", file=sys.stderr)


def _answer_text(result: dict[str, Any], *, one_line: bool) -> str:
    """One answer as text: ``label<TAB>name=p  name=p``; a joint intent + slot model's is
    its intent, then a line per slot (``one_line``: the slots on the same line)."""
    if "slots" in result:
        slots = [f"{s['slot']}: {s['text']}" for s in result["slots"]] or ["(no slots)"]
        head = f"intent\t{result['intent']}\t{result['intent_probability']:.4f}"
        return (f"{head}\t{'; '.join(slots)}" if one_line
                else "\n".join([head, *(f"  {s}" for s in slots)]))
    probs = "  ".join(f"{k}={v:.4f}" for k, v in result["probabilities"].items())
    return f"{result['label']}\t{probs}"


def _predict_file(args: argparse.Namespace, model: Any) -> int:
    """``nas predict DIR --file F``: every text of F, streamed, one answer per line in
    file order (JSON Lines under ``--json``, each with its line number and text)."""
    from tqdm import tqdm

    from nas.runtime import PREDICT_BATCH_SIZE
    from nas.textfile import columns, count_rows, read_rows

    path = Path(args.file).expanduser()
    pair_column = args.pair_column
    if pair_column is None and model.text_input == "pair" and "text_pair" in columns(path):
        pair_column = "text_pair"
    rows = read_rows(path, args.text_column, pair_column)
    first = next(rows, None)
    if first is None:
        raise NasError(f"--file {path}: holds no text; give one text per line, or a table "
                       "with a text column")
    if model.text_input == "pair" and first.text_pair is None:
        raise NasError(f"the model in {args.directory} reads a pair of texts; give --file a "
                       "table (.csv, .tsv, .jsonl) and name the second text with --pair-column")
    model.check_texts([first.text], None if first.text_pair is None else [first.text_pair])
    _warn_random(args, model)
    total = count_rows(path)
    examples = itertools.chain([first], rows)
    batch_size = args.batch_size or PREDICT_BATCH_SIZE
    pending: collections.deque[Any] = collections.deque()  # rows read, answers to come

    def feed() -> Any:
        for row in examples:
            pending.append(row)
            yield row.text, row.text_pair

    bar = tqdm(total=total, unit="text", file=sys.stderr, desc="predict",
               disable=True if args.no_progress or total <= batch_size else None)
    try:
        for result in model.predict_stream(feed(), batch_size):
            row = pending.popleft()
            if args.json:
                extra = {"text_pair": row.text_pair} if row.text_pair is not None else {}
                print(json.dumps({"line": row.line, "text": row.text, **extra, **result},
                                 ensure_ascii=False))
            else:
                print(_answer_text(result, one_line=True))
            bar.update()
    finally:
        bar.close()
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
    from nas.runtime import NOISY_IQR, benchmark, benchmark_pair, load

    sizes = _positive_ints(args.batch_sizes, "--batch-sizes")
    model = load(args.directory, args.runtime, args.threads, device=args.device)
    rows = benchmark(model, sizes, args.seq_len, args.repeats, args.warmup)
    where = (f"{rows[0]['threads']} threads" if "device" not in rows[0]
             else f"{rows[0]['device']}, CUDA events")
    lines = [f"{args.directory} ({args.runtime}, sequence length {args.seq_len}, {where}):"]
    lines += [f"  batch {r['batch_size']:>4}: median {r['median_ms']:8.2f} ms  IQR "
              f"{r['iqr_ms']:7.2f} ms  p90 {r['p90_ms']:8.2f} ms  "
              f"{r['throughput_per_s']:9.1f} sequences/s" for r in rows]
    document: dict[str, Any] = {"directory": str(args.directory), "results": rows}
    paired = []
    if args.against:
        against = load(args.against, args.runtime, args.threads, device=args.device)
        paired = benchmark_pair(model, against, sizes, args.seq_len, args.repeats, args.warmup)
        document["against"] = {"directory": str(args.against), "results": paired}
        lines.append(f"speed-up over {args.against} (interleaved rounds, same batches, "
                     f"{paired[0]['runtime']}):")
        lines += [f"  batch {r['batch_size']:>4}: {r['speedup']:.2f}x  IQR "
                  f"{r['speedup_iqr'][0]:.2f}-{r['speedup_iqr'][1]:.2f}  ({r['rounds']} "
                  f"rounds; {r['teacher_ms']:.2f} ms against {r['student_ms']:.2f} ms)"
                  for r in paired]
    emit(args, document, "\n".join(lines))
    for r in rows:
        if r["noisy"]:
            print(f"warning: batch {r['batch_size']}: the IQR ({r['iqr_ms']:.2f} ms) is over "
                  f"{NOISY_IQR:.0%} of the median ({r['median_ms']:.2f} ms); the machine is busy "
                  "or the run too short (use more --repeats, --threads 1, an idle machine)",
                  file=sys.stderr)
    for r in paired:
        if r["noisy"]:
            print(f"warning: batch {r['batch_size']}: the two timings' IQRs together are "
                  "larger than the difference between their medians; the two cannot be told "
                  "apart on this machine now (use more --repeats, --threads 1, an idle "
                  "machine)", file=sys.stderr)
    return 0
