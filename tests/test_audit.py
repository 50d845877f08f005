"""The ranking audit (``nas audit``): statistics worked out by hand, candidates spread
over parameter counts, the audit on any space with fake evaluators (and its resume),
and ``nas audit`` on the EfficientBERT smoke experiment (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from evaluators.audit import (
    AuditParts,
    latency_candidates,
    latency_span,
    rank_agreement,
    run_audit,
    running_mean,
    spread_candidates,
    steps_to_reach,
)
from evaluators.base import EvalResult, Evaluator, Objective
from nas.cost import count_costs
from nas.errors import NasError
from nas.space import get_space, small_config

ROOT = Path(__file__).resolve().parents[1]


def test_rank_agreement_matches_hand_counts():
    # pairs: (1,2,3,4) vs (1,3,2,4): 5 concordant, 1 discordant of 6 → τ = 4/6;
    # ρ = 1 − 6·Σd²/(n(n²−1)) = 1 − 6·2/60 = 0.8
    out = rank_agreement([1, 2, 3, 4], [1, 3, 2, 4], n_boot=200, seed=0)
    assert out["kendall_tau"] == pytest.approx(4 / 6)
    assert out["spearman_rho"] == pytest.approx(0.8)
    lo, hi = out["kendall_tau_ci"]
    assert -1.0 <= lo <= out["kendall_tau"] <= hi <= 1.0
    assert out["kendall_tau_ci_width"] == pytest.approx(hi - lo)
    same = rank_agreement([1, 2, 3], [1, 2, 3], n_boot=50)
    assert same["kendall_tau"] == pytest.approx(1.0) and same["spearman_rho"] == pytest.approx(1.0)
    tied = rank_agreement([1, 1, 1], [1, 2, 3], n_boot=20)
    assert tied["kendall_tau"] is None and tied["kendall_tau_undefined_resamples"] == 20
    with pytest.raises(NasError, match="equal-length"):
        rank_agreement([1, 2], [1, 2, 3])


def test_steps_to_reach_smooths_both_curves():
    assert list(running_mean([4, 2, 0, 2], 2)) == [4, 3, 1, 1]
    scratch = list(np.linspace(10, 1, 20))  # final smoothed (window 2): 1.2368...
    inherited = [3.0, 2.0, 1.0, 1.0, 1.0] + [1.0] * 15
    out = steps_to_reach(inherited, scratch)
    assert out["target"] == pytest.approx((scratch[-1] + scratch[-2]) / 2)
    assert out["steps"] == 4 and out["fraction"] == pytest.approx(4 / 20)  # (1+1)/2 at step 4
    never = steps_to_reach([5.0] * 20, scratch)
    assert never["steps"] is None and never["fraction"] is None


@pytest.fixture(scope="module")
def space():
    return get_space("adabert", **small_config("adabert"))


def test_candidates_are_spread_over_parameter_counts(space):
    picked = spread_candidates(space, 6, seed=0, seq_len=16)
    params = [count_costs(space, a, 16).params for a in picked]
    assert len({a.id for a in picked}) == 6 and params == sorted(params)
    pool = sorted(count_costs(space, space.sample(np.random.default_rng(s)), 16).params
                  for s in range(200))
    assert params[0] <= np.quantile(pool, 0.3) and params[-1] >= np.quantile(pool, 0.7)
    budget = params[2]
    assert all(count_costs(space, a, 16).params <= budget
               for a in spread_candidates(space, 3, seed=1, max_params=budget, seq_len=16))
    assert spread_candidates(space, 6, seed=0, seq_len=16) == picked  # seeded
    with pytest.raises(NasError, match="fit the budget"):
        spread_candidates(space, 3, max_params=1, seq_len=16)


class ByParams(Evaluator):
    """A stand-in evaluator: the candidate's parameter count (scaled) plus seeded noise,
    and a loss curve that starts lower with ``head_start``; counts its calls."""

    objectives = (Objective("score", "maximize"),)

    def __init__(self, space, noise, seed, head_start=0.0, fail=()):
        self.space, self.noise, self.seed, self.head_start = space, noise, seed, head_start
        self.fail, self.calls = set(fail), 0

    def evaluate(self, arch, trial=None):
        self.calls += 1
        if arch.id in self.fail:
            return EvalResult.failed("diverged: loss is nan")
        rng = np.random.default_rng([self.seed, int(arch.id, 16) % 2**31])
        value = count_costs(self.space, arch, 16).params / 1e5 + self.noise * rng.normal()
        curve = list(np.linspace(10 - self.head_start, 1, 20))
        return EvalResult(values=(value,), metrics={"text_kd_curve": curve})


def test_the_audit_runs_on_any_space_and_resumes(space, tmp_path):
    picked = spread_candidates(space, 5, seed=0, seq_len=16)
    good, bad = ByParams(space, 0.0, 1, head_start=9.5, fail={picked[0].id}), \
        ByParams(space, 50.0, 2)
    full = ByParams(space, 0.0, 3)
    parts = AuditParts(space=space, arms={"good": good, "noisy": bad}, full=full,
                       folder=tmp_path, seq_len=16, curve_arms=("good", "noisy"))
    summary = run_audit(parts, n=5, seed=0, n_boot=100)
    good_arm, noisy = summary["arms"]["good"], summary["arms"]["noisy"]
    # the failed candidate scores 0 (lowest), which its smallest size also predicts
    assert good_arm["failed"] == 1 and good_arm["kendall_tau"] == pytest.approx(1.0)
    assert noisy["kendall_tau"] < 1.0 and summary["candidates"] == 5
    reach = summary["steps_to_reach"]
    assert reach["measured"] == 4 and reach["within_one_fifth"] == 4  # 0.5 at step 1 < 1.24
    text = (tmp_path / "audit.md").read_text()
    assert "| good | +1.000" in text and "within 1/5 of them: 4" in text
    assert (tmp_path / "audit_scatter.png").stat().st_size > 0
    saved = json.loads((tmp_path / "audit.json").read_text())
    assert len(saved["candidates"]) == 5 and saved["arms"]["good"]["failed"] == 1
    assert (good.calls, bad.calls, full.calls) == (5, 5, 5)
    again = run_audit(parts, n=5, seed=0, n_boot=100)  # every evaluation is on disk
    assert (good.calls, bad.calls, full.calls) == (5, 5, 5)
    assert again["arms"]["good"]["kendall_tau"] == good_arm["kendall_tau"]
    with pytest.raises(NasError, match="at least 3"):
        run_audit(parts, n=2)


def fake_latency(space):
    """A made-up batch-1 latency that grows steeply with the parameter count, so that a
    random pool spans more than 10x."""
    return lambda arch: 0.01 * (count_costs(space, arch, 16).params / 1e4) ** 3


def test_latency_spread_candidates_span_the_pool(space):
    latency = fake_latency(space)
    picked = latency_candidates(space, 6, latency, seed=0, seq_len=16)
    ms = [latency(a) for a in picked]
    assert len({a.id for a in picked}) == 6 and ms == sorted(ms)
    pool = [latency(space.sample(np.random.default_rng(s))) for s in range(200)]
    # the pool's fastest and slowest are in, and the rest lie between, spread in log
    assert ms[0] <= np.quantile(pool, 0.05) and ms[-1] >= np.quantile(pool, 0.95)
    assert latency_span(ms) >= 10 and latency_span([2.0, 1.0]) == 2.0
    assert latency_candidates(space, 6, latency, seed=0, seq_len=16) == picked  # seeded
    budget = count_costs(space, picked[3], 16).params
    assert all(count_costs(space, a, 16).params <= budget for a in latency_candidates(
        space, 3, latency, seed=1, max_params=budget, seq_len=16))


def test_the_audit_selects_by_latency_spread_and_says_its_span(space, tmp_path):
    full = ByParams(space, 0.0, 3)
    parts = AuditParts(space=space, arms={"good": ByParams(space, 0.0, 1)}, full=full,
                       folder=tmp_path, seq_len=16, latency_fn=fake_latency(space))
    summary = run_audit(parts, n=5, seed=0, n_boot=20, select="latency-spread")
    latencies = summary["latency_ms_predicted"]
    assert summary["select"] == "latency-spread" and latencies == sorted(latencies)
    assert summary["latency_span"] >= 10 and not summary.get("warnings")
    text = (tmp_path / "audit.md").read_text()
    assert "spread over predicted latency" in text and "(at least 10x)" in text
    assert summary["arms"]["good"]["kendall_tau"] == pytest.approx(1.0)
    narrow = run_audit(parts, n=5, seed=0, n_boot=20, select="latency-spread", min_span=1e9)
    assert "less than the 1e+09x asked for" in narrow["warnings"][0]
    with pytest.raises(NasError, match="needs a latency model of the space"):
        run_audit(AuditParts(space=space, arms={}, full=full, folder=tmp_path, seq_len=16),
                  n=5, select="latency-spread")
    with pytest.raises(NasError, match="unknown; use one of params, latency-spread"):
        run_audit(parts, n=5, select="flops")


def test_a_method_without_a_proxy_says_so(tmp_path, capsys):
    from nas.cli import main

    assert main(["audit", str(ROOT / "experiments" / "tinybert_smoke.yaml"),
                 "--run-dir", str(tmp_path / "a")]) == 2
    assert "method 'tinybert' has no proxy evaluator to audit" in capsys.readouterr().err


@pytest.mark.slow
def test_nas_audit_on_the_efficientbert_smoke_experiment(tmp_path, monkeypatch, capsys):
    from nas.cli import main

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    run_dir = tmp_path / "audit"
    assert main(["audit", str(ROOT / "experiments" / "efficientbert_smoke.yaml"),
                 "--run-dir", str(run_dir), "--candidates", "3", "--bootstrap", "50",
                 "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary["arms"]) == {"warm-up", "no warm-up"} and summary["candidates"] == 3
    for arm in summary["arms"].values():
        assert arm["kendall_tau"] is None or -1.0 <= arm["kendall_tau"] <= 1.0
        assert len(arm["kendall_tau_ci"]) == 2
    assert summary["steps_to_reach"]["measured"] == 3
    # the seed-noise check (--noise-seeds, default 2) reseeded every arm and the retrain
    assert set(summary["seed_noise"]["sd"]) == {"warm-up", "no warm-up", "full"}
    assert set(summary["spread_sd"]) == {"warm-up", "no warm-up", "full"}
    saved = json.loads((run_dir / "audit.json").read_text())
    for row in saved["candidates"]:
        assert row["results"]["warm-up"]["costs"]["inherited"] is True
        assert row["results"]["no warm-up"]["costs"]["inherited"] is False
        assert len(row["results"]["warm-up"]["metrics"]["text_kd_curve"]) == 4
        assert row["params"] <= summary["notes"]["budget"]
    assert (run_dir / "audit_scatter.png").is_file()
    assert math.isfinite(summary["full_mean_seconds"])


class SeedOnly(Evaluator):
    """Scores that hardly depend on the architecture but move by ``noise`` with the seed."""

    objectives = (Objective("score", "maximize"),)

    def __init__(self, noise, seed):
        self.noise, self.seed, self.log = noise, seed, []  # a copy shares the log

    def evaluate(self, arch, trial=None):
        self.log.append((self.seed, arch.id))
        tiny = 1e-3 * (int(arch.id, 16) % 7)
        return EvalResult(values=(tiny + self.noise * np.random.default_rng(self.seed).normal(),))


def test_the_audit_warns_when_candidates_spread_less_than_the_seed_noise(space, tmp_path):
    full = ByParams(space, 0.0, 3)
    flat = SeedOnly(10.0, 1)
    parts = AuditParts(space=space, arms={"flat": flat}, full=full, folder=tmp_path,
                       seq_len=16)
    summary = run_audit(parts, n=5, seed=0, n_boot=50, noise_seeds=2)
    noise = summary["seed_noise"]
    assert noise["sd"]["full"] == 0.0 and noise["sd"]["flat"] > 1.0
    assert summary["spread_sd"]["flat"] < 0.01 < summary["spread_sd"]["full"]
    assert len(summary["warnings"]) == 1 and summary["warnings"][0].startswith("flat: ")
    # the 5 candidates, then the middle one with 2 more seeds
    assert len(flat.log) == 7 and {s for s, _ in flat.log[5:]} == {1000, 1001}
    assert flat.log[5][1] == flat.log[6][1] == noise["arch_id"]
    text = (tmp_path / "audit.md").read_text()
    assert "**warning**: flat: the candidates spread by sd" in text
    run_audit(parts, n=5, seed=0, n_boot=50, noise_seeds=2)  # resumed: nothing re-run
    assert len(flat.log) == 7
    from evaluators.audit import reseeded

    assert reseeded(flat, 9).seed == 9 and flat.seed == 1
