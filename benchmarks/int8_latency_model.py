"""The ONNX Runtime int8 latency model: a real calibration, its time and its MAPE on
held-out children.

Run: ``OMP_NUM_THREADS=1 python benchmarks/int8_latency_model.py [--space bert-subnet]
[--small] [--archs 16] [--held-out 6] [--seq-len 128] [--runtime onnx-int8]
[--clock cpu] [--table PATH]``.

:func:`nas.latency.calibrate_graph` with these settings on one space (``--small``: the
space's small test configuration, else its defaults, MiniLM-L6-H384's shape for
``bert-subnet``) at batch 1, one thread: ``--archs + --held-out`` seeded children each
exported to int8 ONNX in a temporary folder and timed on ONNX Runtime at one thread; the
first ``--archs`` fit the linear model, the last ``--held-out`` measure its error. Prints
the calibration's seconds (wall, as the table records them), the coefficients, each
held-out child's measured and predicted milliseconds and the MAPE; ``--table`` saves the
table (the run's cache folder keeps its own). Record the output in
``benchmarks/RESULTS.md`` and ``docs/latency.md`` with the command and the machine's load.
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="bert-subnet")
    ap.add_argument("--small", action="store_true", help="the space's small test configuration")
    ap.add_argument("--archs", type=int, default=16, help="children the model is fitted on")
    ap.add_argument("--held-out", type=int, default=6, help="children it is checked on")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--runtime", default="onnx-int8", choices=["onnx", "onnx-int8"])
    ap.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    ap.add_argument("--repeats", type=int, default=20, help="timed runs per child at most")
    ap.add_argument("--table", help="save the table here (JSON)")
    args = ap.parse_args()

    from nas.latency import GRAPH_FEATURES, Setting, calibrate_graph, space_key
    from nas.space import get_space, small_config

    space = get_space(args.space, **(small_config(args.space) if args.small else {}))
    setting = Setting(1, args.seq_len, 1)
    table = calibrate_graph(space, setting, args.runtime, archs=args.archs,
                            held_out=args.held_out, repeats=args.repeats, clock=args.clock,
                            log=print)
    fit = table.graph_fits[space_key(space)][setting.key]
    print("coefficients: " + ", ".join(f"{n} {c:.4g}" for n, c in
                                       zip(GRAPH_FEATURES, fit.coefs, strict=True)))
    print(f"fitted on {len(fit.archs)} children: {min(fit.measured_ms):.2f}.."
          f"{max(fit.measured_ms):.2f} ms ({args.clock} clock)")
    for arch, measured, predicted in zip(fit.held_out, fit.held_out_ms,
                                         fit.held_out_predicted_ms, strict=True):
        print(f"held out {arch}: measured {measured:.3f} ms, predicted {predicted:.3f} ms "
              f"({100 * (predicted - measured) / measured:+.1f} %)")
    print(f"{args.space} {setting.describe()} on {args.runtime}: {fit.describe()}; "
          f"{table.describe(setting)}")
    if args.table:
        table.save(args.table)


if __name__ == "__main__":
    main()
