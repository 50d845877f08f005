"""``nas latency calibrate`` and ``nas latency show``: the latency model's table."""

from __future__ import annotations

import argparse

from nas.cli.common import add_space_config_option, emit, parse_space_config, seed_int

DEFAULT_SPACES = ("adabert", "efficientbert", "mobilebert-grid")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "latency", help="calibrate and inspect the CPU latency model (nas cost --latency-model)")
    sub = p.add_subparsers(dest="latency_command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser(
        "calibrate", help="time op calls and fit the overhead on this machine (minutes)",
        description="Times every op call of a pool of random architectures per space and "
                    "setting, fits the per-space overhead on children timed end to end, and "
                    "stores the table in the cache folder (one file per machine).")
    c.add_argument("--spaces", nargs="+", default=list(DEFAULT_SPACES), metavar="SPACE",
                   help="spaces to calibrate (default: %(default)s)")
    c.add_argument("--batch-sizes", nargs="+", type=int, default=[1], metavar="B",
                   help="batch sizes to calibrate for (default 1)")
    c.add_argument("--seq-lens", nargs="+", type=int, default=[128], metavar="L",
                   help="sequence lengths to calibrate for (default 128)")
    c.add_argument("--threads", nargs="+", type=int, default=[1], metavar="T",
                   help="CPU threads (torch.set_num_threads) to calibrate for")
    c.add_argument("--archs", type=int, default=10, help="children timed end to end per space")
    c.add_argument("--pool", type=int, default=200, help="random draws whose op calls are timed")
    c.add_argument("--repeats", type=int, default=10, help="most timed runs per op call")
    c.add_argument("--end-to-end", type=int, default=10, help="most timed runs per child")
    c.add_argument("--seed", type=seed_int, default=0, help="seed of the random architectures")
    c.add_argument("--clock", choices=["wall", "cpu"],
                   help="the thread's CPU time (the default and the runs' clock: one thread; "
                        "other jobs' load barely moves it), or the wall clock")
    c.add_argument("--table", help="table file (default: this machine's, in the cache folder)")
    add_space_config_option(c)
    c.add_argument("--json", action="store_true", help="print the result as one JSON document")
    c.set_defaults(func=cmd_calibrate)

    s = sub.add_parser("show", help="what a latency table holds and which machine it is for")
    s.add_argument("--table", help="table file (default: this machine's)")
    s.add_argument("--clock", choices=["wall", "cpu"],
                   help="which clock's table to show (default: the runs' clock, cpu)")
    s.add_argument("--json", action="store_true", help="print the result as one JSON document")
    s.set_defaults(func=cmd_show)


def cmd_calibrate(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from nas.errors import NasError
    from nas.latency import (
        DEFAULT_CLOCK,
        LatencyTable,
        Setting,
        calibrate,
        default_table_path,
        machine,
    )
    from nas.space import get_space

    clock = args.clock or DEFAULT_CLOCK

    for flag, values in (("--batch-sizes", args.batch_sizes), ("--seq-lens", args.seq_lens),
                         ("--threads", args.threads), ("--archs", [args.archs]),
                         ("--pool", [args.pool]), ("--repeats", [args.repeats]),
                         ("--end-to-end", [args.end_to_end])):
        bad = [v for v in values if v < 1]
        if bad:
            raise NasError(f"{flag} must be positive integers, got {bad[0]}")
    config = parse_space_config(args.config)
    spaces = [get_space(name, **config) for name in args.spaces]
    settings = [Setting(b, L, t) for t in args.threads for b in args.batch_sizes
                for L in args.seq_lens]
    path = Path(args.table) if args.table else default_table_path(clock)
    table, note = None, "new table"
    if path.is_file():
        old = LatencyTable.load(path)
        here = machine()
        if {k: old.machine.get(k) for k in here} != here:
            note = f"replaces a table calibrated on {old.machine.get('cpu')}"
        elif old.clock != clock:
            note = f"replaces a table on the {old.clock} clock"
        else:
            table, note = old, "added to the existing table"
    start = time.perf_counter()
    log = None if args.json else print
    table = calibrate(spaces, settings, archs=args.archs, pool=args.pool, repeats=args.repeats,
                      end_to_end=args.end_to_end, seed=args.seed, clock=clock,
                      table=table, log=log)
    table.save(path)
    seconds = time.perf_counter() - start
    emit(args, {"table": str(path), "seconds": seconds, "machine": table.machine,
                "clock": table.clock, "calibrated": table.calibrated, "noise": table.noise,
                "settings": [s.key for s in settings], "spaces": args.spaces},
         f"latency table {path} ({note}): {len(spaces)} spaces x {len(settings)} settings "
         f"in {seconds:.0f} s; {table.describe()}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from nas.latency import DEFAULT_CLOCK, LatencyModel

    model = LatencyModel.load(args.table, args.clock or DEFAULT_CLOCK)
    t = model.table
    m = t.machine
    ops = {k: len(v) for k, v in t.ops.items()}
    fits = {s: sorted(by) for s, by in t.fits.items()}
    data = {"table": str(model.path), "machine": m, "clock": t.clock,
            "calibrated": t.calibrated, "noise": t.noise, "ops": ops, "fits": fits}
    lines = [f"latency table {model.path}",
             f"  machine: {m.get('cpu')}, {m.get('cores')} cores, torch {m.get('torch')}, "
             f"threads {m.get('threads')}; {t.describe()}"]
    lines += [f"  {k}: {n} op keys, noise "
              f"{'unknown' if k not in t.noise else f'{100 * t.noise[k]:.1f} %'}"
              for k, n in ops.items()]
    lines += [f"  {s}: {', '.join(by)}" for s, by in fits.items()]
    if t.graph_fits:  # an ONNX runtime's table: its fits' held-out error and seconds
        notes = {s: {k: f.describe() for k, f in by.items()} for s, by in t.graph_fits.items()}
        data.update(runtime=t.runtime, graph_fits=notes)
        lines += [f"  {s} {k}: {note}" for s, by in notes.items() for k, note in by.items()]
    emit(args, data, "\n".join(lines))
    return 0
