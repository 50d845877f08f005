"""``nas cost SPACE [--arch A] [--seq-len L] [--latency] [--latency-model]``."""

from __future__ import annotations

import argparse

from nas.cli.common import (
    add_space_config_option,
    arch_from_args,
    emit,
    positive_int,
    space_from_args,
)
from nas.units import human


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cost", help="parameters, FLOPs (2 x multiply-adds) and optionally CPU latency")
    p.add_argument("space", help="registered space name (nas spaces list)")
    p.add_argument("--arch", help="architecture JSON file or inline JSON (default: the default)")
    p.add_argument("--seq-len", type=positive_int, default=128,
                   help="tokens per example (at most the model's positions)")
    p.add_argument("--latency", action="store_true", help="build the child and time it on CPU")
    p.add_argument("--latency-model", action="store_true",
                   help="predict CPU latency from the calibrated table (nas latency calibrate)")
    p.add_argument("--batch-size", type=positive_int, default=1,
                   help="batch size for --latency and --latency-model")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="CPU threads for --latency-model")
    p.add_argument("--latency-table", help="latency table file (default: this machine's)")
    p.add_argument("--latency-clock", choices=["wall", "cpu"],
                   help="which calibrated clock --latency-model predicts (default: the "
                        "runs' clock, cpu)")
    p.add_argument("--repeats", type=positive_int, default=10, help="timed repeats for --latency")
    add_space_config_option(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    p.set_defaults(func=cmd_cost)


def cmd_cost(args: argparse.Namespace) -> int:
    from nas.cost import count_costs

    space = space_from_args(args)
    arch = arch_from_args(space, args.arch)
    costs = count_costs(space, arch, args.seq_len)
    data = {"space": space.name, "arch_id": arch.id, **costs.to_dict()}
    lines = [
        f"{space.name} arch {arch.id} at sequence length {args.seq_len}:",
        f"  parameters   {human(costs.params)} ({costs.params:,})",
        *(f"    {g:<11} {human(n)}" for g, n in costs.params_by_group.items()),
    ]
    if costs.params_paper is not None:
        groups = "+".join(space.config["paper_params_groups"])
        lines.append(f"  parameters, paper convention ({groups}): {human(costs.params_paper)}")
    lines.append(
        f"  FLOPs        {human(costs.flops)} per example (= 2 x {human(costs.macs)} MACs)")
    if args.latency:
        from nas.builder import build_child
        from nas.cost import batch_for, measure_latency

        model = build_child(space, arch)
        lat = measure_latency(model, batch_for(space, args.batch_size, args.seq_len),
                              repeats=args.repeats)
        data["latency"] = lat.to_dict()
        lines.append(f"  CPU latency  median {lat.median_ms:.1f} ms, p90 {lat.p90_ms:.1f} ms "
                     f"(batch {lat.batch_size}, {lat.threads} threads)")
    if args.latency_model:
        from nas.latency import DEFAULT_CLOCK, LatencyModel

        latency_model = LatencyModel.load(args.latency_table,
                                          args.latency_clock or DEFAULT_CLOCK)
        pred = latency_model.explain(space, arch, args.batch_size, args.seq_len, args.threads)
        data["latency_predicted"] = {"ms": pred.latency_ms, "batch_size": args.batch_size,
                                     "threads": args.threads, "op_calls": pred.calls,
                                     "estimated_op_calls": pred.estimated_calls,
                                     "clock": latency_model.table.clock,
                                     "table": str(latency_model.path)}
        estimated = (f"; {pred.estimated_calls} of {pred.calls} op calls estimated"
                     if pred.estimated_calls else "")
        lines.append(f"  CPU latency  predicted {pred.latency_ms:.1f} ms "
                     f"({pred.setting.describe()}, {latency_model.table.clock} clock, latency model"
                     f"{estimated})")
    emit(args, data, "\n".join(lines))
    return 0
