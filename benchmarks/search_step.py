"""Time per AdaBERT search step: single-path (hard Gumbel, GDAS) vs the full DARTS mixture,
and the search step vs a training step of a derived child at the same batch size.

Run: ``python benchmarks/search_step.py [--batch-size 32] [--seq-len 64] [--repeats 5]``.
Prints the times and their ratios, all measured in this one run; record the output in
``benchmarks/RESULTS.md`` with the command.
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F

from nas.arch_params import ArchParameters
from nas.builder import build_child, build_supernet
from nas.cost import dummy_batch
from nas.space import get_space
from nas.timing import time_call


def timed(fn, repeats: int, warmup: int = 1) -> float:
    """Median milliseconds of ``fn`` (the engine's one timing helper)."""
    return time_call(fn, warmup, repeats).median_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    space = get_space("adabert")  # hidden 128, K_max 8, 30522-token vocabulary
    supernet = build_supernet(space).train()
    alphas = ArchParameters([c for c in space.choices()])
    batch = dummy_batch(args.batch_size, args.seq_len)
    labels = torch.randint(0, 2, (args.batch_size,))
    gen = torch.Generator().manual_seed(0)
    # a typical derived cell: two incoming edges per node (AdaBERT's derivation,
    # docs/reference.md#adabert), depth 4
    kept = {"cell.n0.from_prev2": "std_conv_5", "cell.n0.from_prev1": "dil_conv_3",
            "cell.n1.from_prev1": "std_conv_3", "cell.n1.from_n0": "skip",
            "cell.n2.from_n0": "max_pool_3", "cell.n2.from_n1": "std_conv_7"}
    arch = space.validate({**{c.name: "zero" for c in space.choices() if c.kind == "op"},
                           **kept, "depth": 4})
    child = build_child(space, arch).train()
    child_opt = torch.optim.SGD(child.parameters(), lr=1e-3)

    def single_path() -> None:
        weights = alphas.gumbel(1.0, hard=True, generator=gen)
        loss = F.cross_entropy(supernet(batch, weights=weights, hard=True).logits, labels)
        loss.backward()
        supernet.zero_grad(set_to_none=True)
        alphas.zero_grad(set_to_none=True)

    def mixture() -> None:
        loss = F.cross_entropy(supernet(batch, weights=alphas.softmax()).logits, labels)
        loss.backward()
        supernet.zero_grad(set_to_none=True)
        alphas.zero_grad(set_to_none=True)

    def child_step() -> None:
        loss = F.cross_entropy(child(batch).logits, labels)
        child_opt.zero_grad(set_to_none=True)
        loss.backward()
        child_opt.step()

    t_single = timed(single_path, args.repeats * 4)  # samples vary: more repeats
    t_mix = timed(mixture, args.repeats)
    t_child = timed(child_step, args.repeats * 4)
    print(f"batch {args.batch_size} × {args.seq_len} tokens, {torch.get_num_threads()} threads")
    print(f"single-path (hard Gumbel) step : {t_single:8.1f} ms (forward + backward, median)")
    print(f"full mixture (DARTS) step      : {t_mix:8.1f} ms")
    print(f"derived child training step    : {t_child:8.1f} ms (arch {arch.id}, "
          f"depth {arch['depth']})")
    print(f"ratio mixture / single-path    : {t_mix / t_single:8.2f}x")
    print(f"ratio single-path / child step : {t_single / t_child:8.2f}x")


if __name__ == "__main__":
    main()
