"""Plot a compress run's retrained front against the five methods' recorded students
(docs/compress.md#measured-on-sst-2): accuracy on SST-2's clean test sentences against the
batch-1 speed-up over the teacher each was distilled from, one thread.

The compress points are read from each run folder given (``final/<tag>/result.json``, the
mean over the final seeds, and ``teacher.json``), labelled by the run's searcher (TPE's
front, the knapsack's picks, uniform truncation): a run that recorded paired timings
(``metrics.json``'s ``speedup.final``: the teacher and each final model timed in
interleaved rounds, docs/latency.md#speed-ups-one-timing-protocol) gives those; an older
run's speed-up is its teacher.json batch-1 latency over each model's (the previous
protocol: the teacher as a ``transformers`` model, possibly a cached row), the model's
latency the least of its seeds' medians (the seeds share one architecture, and a run
beside another job can inflate one seed's timing: the knapsack run timed one model at
5.28 and 3.27 ms). The students' numbers are the recorded results of their method
pages (each row names its page and commit); each student's speed-up was measured against
the same one-epoch MiniLM-L6-H384 teacher (89.84 on the same sentences) in its own run,
under the previous protocol.

    python experiments/compress_vs_students.py runs/compress_sst2 \\
        runs/compress_sst2_knapsack runs/compress_sst2_truncation runs/compress_sst2_kl \\
        --out docs/img/compress_vs_students.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

#: The five methods' students as recorded: (label, clean test accuracy %, batch-1
#: speed-up over the teacher, page, commit). EfficientBERT's students are left out:
#: their batch-1 latency against the teacher is not recorded.
STUDENTS: list[tuple[str, float, float, str, str]] = [
    ("AdaBERT, searched cell", 81.33, 32.9, "docs/adabert.md", "ec5105a"),
    ("AdaBERT + augmentation x2", 82.87, 32.9, "docs/adabert.md", "35c462d"),
    ("TinyBERT-4 (L4 H312)", 81.27, 2.4, "docs/tinybert.md", "3ffe15f"),
    ("TinyBERT L4 H120 (3 seeds)", 79.97, 3.6, "docs/tinybert.md", "585c9a4"),
    ("MobileBERT, grid-searched", 83.86, 2.2, "docs/mobilebert.md", "66b89d8"),
    ("MobileBERT 11.6M, all at once", 86.30, 0.9, "docs/mobilebert.md", "71a90d5"),
    ("Mixed vocabulary", 79.46, 2.2, "docs/mixedvocab.md", "42ae9d5"),
]
TEACHER_ACCURACY = 89.84  # the students' teacher on the same sentences (docs/adabert.md)


def batch1_ms(latency: dict[str, Any]) -> float:
    return float(latency["batch1"]["median_ms"])


def compress_points(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's teacher (test accuracy %, batch-1 ms, the run's searcher) and one row
    per final model."""
    teacher = json.loads((run_dir / "teacher.json").read_text(encoding="utf-8"))
    t_ms = batch1_ms(teacher["latency"])
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    paired = (metrics.get("speedup") or {}).get("final") or {}
    rows = []
    for result in sorted((run_dir / "final").glob("*/result.json")):
        row = json.loads(result.read_text(encoding="utf-8"))
        seeds = row["seeds"]
        ms = min(batch1_ms(s["latency"]) for s in seeds)
        kept = sum(v == 1 for k, v in row["arch"].items() if k.endswith("_keep"))
        timed = (paired.get(row["tag"]) or {}).get("batch1")
        rows.append({"tag": row["tag"], "arch_id": row["arch_id"], "kept": kept,
                     "test": 100 * row["test_mean"], "test_sd": 100 * row["test_std"],
                     "seeds": len(seeds), "params": seeds[0]["params"], "ms": ms,
                     "speedup": timed["speedup"] if timed else t_ms / ms,
                     "paired": timed is not None})
    if metrics["search"]["searcher"] == "truncation":  # name them by their depth
        for r in rows:
            r["tag"] = f"first {r['kept']}"
    searcher = metrics["search"]["searcher"]
    if "val_minus_teacher_kl" in metrics["search"].get("objectives", []):
        searcher += ", teacher-kl"  # the proxy scored by the KL to the teacher
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    if config.get("seed_truncations"):
        searcher += " + truncations"  # the study seeded with the first-k truncations
    final_rows = (config.get("final") or {}).get("train_examples")
    if final_rows is not None:  # the final retrain distilled on more of train
        searcher += f", retrained on {final_rows // 1000}k" if isinstance(
            final_rows, int) else ", retrained on all of train"
    return {"test": 100 * teacher["test"]["accuracy"], "ms": t_ms, "searcher": searcher}, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, default=Path("docs/img/compress_vs_students.png"))
    args = parser.parse_args(argv)
    runs: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for teacher, rows in (compress_points(run_dir) for run_dir in args.run_dirs):
        # runs of one kind (e.g. truncations retrained in two runs) share a legend entry
        same = [r for t, r in runs if t["searcher"] == teacher["searcher"]]
        if same:
            same[0].extend(rows)
        else:
            runs.append((teacher, rows))
    print("| compress model | params | test acc (mean ± sd) | seeds | batch-1 ms | speed-up |")
    print("|---|---|---|---|---|---|")
    for teacher, rows in runs:
        print(f"| teacher ({teacher['searcher']} run) | | {teacher['test']:.2f} | | "
              f"{teacher['ms']:.2f} | 1.0x |")
        for r in rows:
            print(f"| {teacher['searcher']} {r['tag']} ({r['arch_id']}) | "
                  f"{r['params'] / 1e6:.2f}M | {r['test']:.2f} ± {r['test_sd']:.2f} | "
                  f"{r['seeds']} | {r['ms']:.2f} | {r['speedup']:.1f}x |")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 6.8))
    ax.scatter([s[2] for s in STUDENTS], [s[1] for s in STUDENTS], marker="s",
               color="tab:gray", label=f"the five methods' students (teacher {TEACHER_ACCURACY})")
    for label, acc, speed, _, _ in STUDENTS:
        ax.annotate(label, (speed, acc), fontsize=7, xytext=(4, -3),
                    textcoords="offset points")
    styles = {"knapsack": ("D", "tab:blue"), "truncation": ("^", "tab:green"),
              "tpe, teacher-kl": ("P", "tab:purple")}
    variants = iter(["tab:olive", "tab:orange", "tab:brown", "tab:pink", "tab:cyan"] * 4)
    for teacher, rows in runs:
        base = teacher["searcher"].split(" + ")[0].split(", retrained")[0]
        marker, color = styles.get(base, ("o", "tab:red"))
        if base != teacher["searcher"]:  # seeded, or retrained on more text
            color = next(variants)
        ax.errorbar([r["speedup"] for r in rows], [r["test"] for r in rows],
                    yerr=[r["test_sd"] for r in rows], fmt=marker, color=color,
                    label=f"compress, {teacher['searcher']} (teacher {teacher['test']:.2f})")
        for r in rows:
            ax.annotate(r["tag"], (r["speedup"], r["test"]), fontsize=7, xytext=(-10, -12),
                        textcoords="offset points", color=color)
    ax.axhline(runs[0][0]["test"], color="tab:red", lw=0.8, ls="--")
    ax.axhline(TEACHER_ACCURACY, color="tab:gray", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlim(0.7, 60)
    ax.set_xlabel("batch-1 speed-up over the teacher (one thread, log scale)")
    ax.set_ylabel("SST-2 clean test accuracy (%)")
    # below the axes: inside, it hid the points near the teacher's line
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"plot: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
