"""Does load move a latency table? The same small table calibrated twice per clock, once
as the machine is and once with a busy-loop process beside it, and the predictions of
seeded children compared (the check behind ``nas.latency.DEFAULT_CLOCK``; the result is
in ``docs/latency.md``, "Which clock").

    OMP_NUM_THREADS=1 python benchmarks/latency_clock_load.py --space adabert --seq-len 64

Prints, per clock, each table's noise, and the predictions of a second quiet table and of
the busy table over the first quiet one's (median and range of the ratio over
``--children`` seeded draws) and their op-time ratios: the second quiet table is the
run-to-run baseline that load is compared with.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

BUSY = "while True: pass"
LOADS = ("quiet", "quiet again", "busy")


def main() -> None:
    from nas.latency import LatencyModel, Setting, calibrate
    from nas.space import get_space

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--space", default="adabert")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--pool", type=int, default=30)
    p.add_argument("--archs", type=int, default=4)
    p.add_argument("--children", type=int, default=20)
    p.add_argument("--busy", type=int, default=1, help="busy-loop processes beside the busy run")
    args = p.parse_args()
    space = get_space(args.space)
    setting = Setting(1, args.seq_len)
    draws = [space.sample(seed) for seed in range(args.children)]
    tables = {}
    for load in LOADS:
        loops = [subprocess.Popen([sys.executable, "-c", BUSY])  # noqa: S603 (a fixed loop)
                 for _ in range(args.busy if load == "busy" else 0)]
        try:
            for clock in ("wall", "cpu"):
                start = time.perf_counter()
                tables[load, clock] = calibrate([space], [setting], archs=args.archs,
                                                pool=args.pool, clock=clock)
                print(f"{load:<11} {clock:<4} calibrated in {time.perf_counter() - start:.0f} s, "
                      f"load average {os.getloadavg()[0]:.1f}, "
                      f"{tables[load, clock].describe(setting)}", flush=True)
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
    for clock in ("wall", "cpu"):
        quiet = LatencyModel(tables["quiet", clock])
        for load in LOADS[1:]:
            other = LatencyModel(tables[load, clock])
            ratios = [other.predict(space, a, 1, args.seq_len)
                      / quiet.predict(space, a, 1, args.seq_len) for a in draws]
            ops_q, ops_o = (tables[t, clock].ops[setting.key] for t in ("quiet", load))
            op_ratios = [ops_o[k] / ops_q[k] for k in ops_q if k in ops_o and ops_q[k] > 0]
            print(f"{clock} clock, {load}/quiet: predictions median "
                  f"{statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f} "
                  f"over {len(draws)} children; op times median "
                  f"{statistics.median(op_ratios):.3f} over {len(op_ratios)} keys")


if __name__ == "__main__":
    main()
