"""``nas report RUN_DIR``: teacher vs searched vs random, with plots (issue: AdaBERT e2e).

Reads ``metrics.json``, ``log.jsonl`` and ``derived_arch.json`` of a run directory and
writes ``report.md``, ``arch_distribution.png`` (how the architecture distribution
moved during the search) and ``derived_cell.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nas.cli.common import human
from nas.errors import NasError
from nas.rundir import RunDir
from nas.teacher import metric_parts, metric_score

OP_GROUPS = {"conv": ("std_conv_3", "std_conv_5", "std_conv_7"),
             "dilated conv": ("dil_conv_3", "dil_conv_5", "dil_conv_7"),
             "pool": ("max_pool_3", "avg_pool_3"), "skip": ("skip",), "zero": ("zero",)}


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _row(name: str, m: dict[str, Any], metric: str, teacher: dict[str, Any]) -> str:
    lat1 = m["latency"]["batch1"]["median_ms"]
    lat32 = m["latency"]["batch32"]["median_ms"]
    size = teacher["params"] / m["params"]
    speed = teacher["latency"]["batch1"]["median_ms"] / lat1
    flops = human(m["flops"]) if "flops" in m else "-"  # from 512 to billions
    value = " / ".join(f"{100 * m['dev'][p]:.2f}" for p in metric_parts(metric))
    return (f"| {name} | {value} | {m['params'] / 1e6:.2f}M | {flops} | "
            f"{_ms(lat1)} | {_ms(lat32)} | {size:.1f}× | {speed:.1f}× |")


def _models(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    found = [metrics["teacher"]] + ([metrics["searched"]] if "searched" in metrics else [])
    return found + list(metrics.get("random", {}).get("runs", []))


def write_report(run_dir: str | Path) -> tuple[str, dict[str, Any]]:
    run = RunDir(run_dir)
    metrics = run.load_json("metrics.json")
    if metrics is None:
        raise NasError(f"{run.path}/metrics.json is missing: the run has not finished "
                       "(rerun `nas search ... --resume`)")
    metric = metrics.get("metric", "accuracy")
    parts = metric_parts(metric)
    teacher = metrics["teacher"]
    lines = [f"# Report: {run.path.name}", "",
             f"| model | dev {' / '.join(parts)} (%) | params | FLOPs/example | "
             "CPU ms (batch 1) | CPU ms (batch 32) | smaller than teacher | faster (batch 1) |",
             "|---|---|---|---|---|---|---|---|",
             _row("teacher", teacher, metric, teacher)]
    if "searched" in metrics:
        lines.append(_row("searched", metrics["searched"], metric, teacher))
    if "random" in metrics:
        r = metrics["random"]
        for i, one in enumerate(r["runs"]):
            name = one.get("tag", f"random{i}").replace("random", "random ", 1)
            lines.append(_row(name, one, metric, teacher))
        what = "" if len(parts) == 1 else f" (mean of {' and '.join(parts)})"
        lines += ["", f"random baseline{what}: {100 * r['mean']:.2f} ± {100 * r['std']:.2f} "
                      f"({len(r['runs'])} architectures)"]
        if "searched" in metrics:
            gap = metric_score(metrics["searched"]["dev"], metric) - r["mean"]
            lines.append(f"searched − random mean: {100 * gap:+.2f} points")
    seq = {m["latency"][f"batch{b}"]["seq_len"] for m in _models(metrics) for b in (1, 32)}
    lines += ["", f"FLOPs per example at {teacher.get('seq_len', '?')} tokens; latency: median "
                  "forward pass of the first dev example(s), one CPU thread, padded to the "
                  f"batch's longest ({', '.join(map(str, sorted(seq)))} tokens)."]
    pictures = _plots(run)
    lines += ["", *(f"![{p.stem}]({p.name})" for p in pictures)]
    text = "\n".join(lines)
    (run.path / "report.md").write_text(text + "\n")
    return text, {"metrics": metrics, "pictures": [str(p) for p in pictures],
                  "report": str(run.path / "report.md")}


def _plots(run: RunDir) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    epochs = run.read_log("search_epoch")
    if epochs:
        fig, (ax_d, ax_o) = plt.subplots(1, 2, figsize=(11, 4))
        xs = [e["epoch"] for e in epochs]
        depth = [e["probs"]["depth"] for e in epochs]
        for k in range(len(depth[0])):
            ax_d.plot(xs, [d[k] for d in depth], marker="o", label=f"K={k + 1}")
        ax_d.set(title="depth distribution", xlabel="epoch", ylabel="probability")
        ax_d.legend(fontsize=7, ncol=2)
        edges = [n for n in epochs[0]["probs"] if n != "depth"]
        from nas.ops.cnn import ADABERT_OPS

        for group, ops in OP_GROUPS.items():
            idx = [ADABERT_OPS.index(o) for o in ops]
            ys = [sum(sum(e["probs"][n][i] for i in idx) for n in edges) / len(edges)
                  for e in epochs]
            ax_o.plot(xs, ys, marker="o", label=group)
        ax_o.set(title="op distribution (mean over the 9 edges)", xlabel="epoch",
                 ylabel="probability")
        ax_o.legend(fontsize=8)
        fig.tight_layout()
        path = run.path / "arch_distribution.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out.append(path)
    derived = run.load_json("derived_arch.json")
    if derived is not None and "space_config" in derived:
        from nas.draw import draw_architecture
        from nas.space import get_space

        space = get_space(derived["space"], **derived["space_config"])
        out.append(draw_architecture(space, derived["choices"], run.path / "derived_cell.png",
                                     title=f"derived architecture {derived['id']}"))
    return out
