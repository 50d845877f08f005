"""CPU latency of any child of any space, predicted without building it.

For one space at one batch size, sequence length and thread count::

    latency ≈ s · Σ_calls t(call) + κ · calls + c

``t(call)`` is the time of one op call, measured once on this machine and keyed by the op
and everything that sets its cost (input widths, output width, params, the depth a
selector reads) at that batch size and length. The sum runs over the op calls of the
child's resolved graph (:func:`nas.graph.plan`), so no model is built. ``s``, ``κ`` and
``c`` absorb what isolated op timings leave out (the executor's per-call overhead, caches
shared between ops) and are fitted by non-negative least squares to end-to-end timings
of the calibration architectures. An op call never timed (a width combination no
calibration architecture had) is estimated from the timed calls of the same op by a
least-squares line in multiply-adds and output size; :meth:`LatencyModel.explain` says
how many calls were estimated.

Calibration (:func:`calibrate`, ``nas latency calibrate``) times every op call key of a
pool of random draws once per setting, each op built alone at its widths and run on
random inputs (median of a few runs), then times a few children end to end (the
smallest and largest of the draws among them) and fits the overhead. Times are on one
of two clocks (:data:`CLOCKS`): the wall clock, or the CPU time of the calling thread,
which on a machine shared with other jobs leaves out the time they hold the core.

The table is JSON in ``cache_root()/latency/<machine>[-cpu].json`` and records the CPU,
core count, torch version, thread counts and clock, when it was calibrated and how noisy
its timings were (per setting, the median over the timed points of the relative
interquartile range of their repeated runs, :func:`nas.timing.relative_iqr`); a table
made on another machine loads with a warning, a noisy calibration is logged as a warning
(and kept: a busy machine still gets a table). The runs' clock (:data:`DEFAULT_CLOCK`)
is the CPU clock at one thread: on the wall clock a table calibrated while the machine
was busy predicted every child slower, and a ``max_latency_ms`` that worked elsewhere was
refused (``docs/latency.md`` has the measurement). A refusal that a predicted latency
caused names the table, its clock, date and noise (:func:`latency_source`).

The model's error on held-out architectures, next to the noise floor of the
measurements, is in ``benchmarks/RESULTS.md`` (``benchmarks/latency_model.py``) and
``docs/latency.md``.

**The runtime a model ships in.** A table has a runtime (:data:`nas.timing.
LATENCY_RUNTIMES`): ``torch`` (the op sum above), or ``onnx``/``onnx-int8``, where the
latency is that of the child's exported ONNX graph (fp32, or int8 as ``nas export
--quantize int8`` makes it) on ONNX Runtime at one thread. ONNX Runtime fuses and
quantises across ops, so isolated op timings would not add up to its time; an ONNX
table holds a :class:`GraphFit` per space and setting instead, a linear model over the
child's op calls (:data:`GRAPH_FEATURES`: a constant, the calls, those with matrix
products, their multiply-adds and output elements; for ``bert-subnet`` these follow the
kept layers, heads, FFN width and hidden width), fitted
by non-negative least squares to end-to-end timings of calibration children each exported
to a temporary folder (:func:`calibrate_graph`), and checked on held-out children: the
table records the calibration's seconds and that held-out MAPE. Tables of different
runtimes are different files (:func:`default_table_path`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import platform
import re
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.optimize import nnls

from nas.cache import cache_root, clear_hint, hold_shared
from nas.checkpoint import atomic_write_json
from nas.errors import NasError
from nas.graph import plan
from nas.ops import OPS, Context, SelectOp
from nas.space import SearchSpace
from nas.timing import LATENCY_RUNTIMES, ONNX_RUNTIMES, relative_iqr, torch_threads

log = logging.getLogger(__name__)

TABLE_FORMAT = 1  # the clock, date and noise were added later; a table without them loads

#: What a table's milliseconds measure: ``wall`` clock time, or ``cpu``, the CPU time of
#: the calling thread (one thread only). On a machine shared with other jobs the wall
#: clock also counts the time other processes hold the core; the CPU clock does not.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}

#: The clock of the runs' tables (:func:`space_predictor`) and of ``nas latency``'s
#: commands: the CPU clock, which the load of other jobs moves far less than the wall
#: clock (measured: ``docs/latency.md``, "Which clock").
DEFAULT_CLOCK = "cpu"

#: A calibration whose median relative IQR (:func:`nas.timing.relative_iqr`) is above this
#: is logged as noisy; it is kept all the same (CI runs on busy machines). Measured on the
#: 2-core machine (``docs/latency.md``): 3-7 % for wall-clock tables of a shared machine,
#: 8-9 % with a busy loop beside them, 3-6 % on the CPU clock either way.
NOISY_SPREAD = 0.075


def time_runs(fn: Callable[[], Any], warmup: int, repeats: int) -> dict[str, float]:
    """Median milliseconds of ``repeats`` calls of ``fn`` (after ``warmup`` untimed ones)
    on every clock of :data:`CLOCKS`, from the same runs."""
    return {c: statistics.median(v) for c, v in _runs(fn, warmup, repeats).items()}


def _runs(fn: Callable[[], Any], warmup: int, repeats: int) -> dict[str, list[float]]:
    """The milliseconds of each of ``repeats`` calls of ``fn`` on every clock."""
    for _ in range(warmup):
        fn()
    runs: dict[str, list[float]] = {c: [] for c in CLOCKS}
    for _ in range(repeats):
        start = {c: clock() for c, clock in CLOCKS.items()}
        fn()
        for c, clock in CLOCKS.items():
            runs[c].append((clock() - start[c]) * 1000.0)
    return runs


def _timed(fn: Callable[[], Any], repeats: int, budget_s: float, clock: str
           ) -> tuple[float, float]:
    """``(median ms, relative IQR)`` of ``fn`` on ``clock``: one probe run sets how many
    runs fit in ``budget_s`` (at least three, at most ``repeats``), after a warm-up run."""
    probe = time_runs(fn, 1, 1)["wall"]
    n = max(3, min(repeats, int(budget_s * 1000 / max(probe, 1e-3))))
    runs = _runs(fn, 1, n)[clock]
    return statistics.median(runs), relative_iqr(runs)


def _check_clock(clock: str, settings: Sequence[Setting] = ()) -> None:
    if clock not in CLOCKS:
        raise LatencyError(f"unknown latency clock {clock!r}; use one of {list(CLOCKS)}")
    if clock == "cpu" and any(s.threads != 1 for s in settings):
        raise LatencyError("the cpu clock times one thread; calibrate --threads 1 with it or "
                           "use --clock wall")


class LatencyError(NasError):
    """No usable latency table: none calibrated, a broken file, or no fit for a setting."""


def check_runtime(runtime: str) -> None:
    """A runtime that :data:`nas.timing.LATENCY_RUNTIMES` does not name is refused."""
    if runtime not in LATENCY_RUNTIMES:
        raise LatencyError(f"unknown latency runtime {runtime!r}; use one of "
                           f"{', '.join(LATENCY_RUNTIMES)}")


class MachineMismatchWarning(UserWarning):
    """A latency table calibrated on another machine (or torch version) was loaded."""


@dataclass(frozen=True)
class Setting:
    """Where a latency is asked for: batch size, sequence length, CPU threads."""

    batch_size: int
    seq_len: int
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LatencyError(f"latency {name} must be a positive integer, got {value!r}")

    @property
    def key(self) -> str:
        return f"threads={self.threads},batch={self.batch_size},seq={self.seq_len}"

    def describe(self) -> str:
        return (f"batch {self.batch_size}, sequence length {self.seq_len}, "
                f"{self.threads} thread{'s' if self.threads > 1 else ''}")


def machine() -> dict[str, Any]:
    """What a latency table belongs to: CPU model, core count, torch version."""
    return {"cpu": _cpu_model(), "cores": os.cpu_count() or 1, "torch": torch.__version__}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def default_table_path(clock: str = DEFAULT_CLOCK,
                       cache_dir: str | os.PathLike[str] | None = None,
                       runtime: str = "torch") -> Path:
    """``cache_root()/latency/<cpu>-<cores>cores[-cpu][-<runtime>].json`` for this
    machine, clock and runtime (a torch table's name has no runtime, as before)."""
    _check_clock(clock)
    check_runtime(runtime)
    m = machine()
    slug = re.sub(r"[^a-z0-9]+", "-", m["cpu"].lower()).strip("-") or "cpu"
    suffix = ("" if clock == "wall" else f"-{clock}") + (
        "" if runtime == "torch" else f"-{runtime}")
    return cache_root(cache_dir) / "latency" / f"{slug}-{m['cores']}cores{suffix}.json"


def space_key(space: SearchSpace) -> str:
    """A space and its configuration (a space built with other widths has other ops)."""
    config = json.dumps(space.config, sort_keys=True, default=str)
    return f"{space.name}@{hashlib.sha1(config.encode(), usedforsecurity=False).hexdigest()[:10]}"


def op_key(op: str, in_widths: Sequence[int], width: int, params: Mapping[str, Any],
           select_value: int | None = None) -> str:
    """Everything that sets the time of one op call, besides batch size and length."""
    return json.dumps([OPS.get(op).name, [int(w) for w in in_widths], int(width), dict(params),
                       select_value], sort_keys=True, default=str)


@dataclass(frozen=True)
class OpCall:
    """One op call of a forward pass: an edge's op or a node's combine."""

    key: str
    op: str
    in_widths: tuple[int, ...]
    width: int
    params: Mapping[str, Any]
    args: tuple[int, ...] = ()  # the inputs' argument positions (a selector reads them)
    select_value: int | None = None  # the depth a selector picks


def op_calls(space: SearchSpace, arch: Mapping[str, Any] | None = None) -> list[OpCall]:
    """The op calls the child of ``arch`` makes in one inference forward pass (the
    distillation-only aux nodes do not run)."""
    arch = space.default() if arch is None else space.validate(arch)
    calls = []
    for st in plan(space.graph, space.choice_map, arch):
        if st.attrs.get("role") == "aux":
            continue
        for e in st.inputs:
            calls.append(OpCall(op_key(e.fixed_op, [e.in_width], e.out_width, e.params),
                                e.fixed_op, (e.in_width,), e.out_width, e.params))
        op = st.fixed_op
        select = st.select_value if issubclass(OPS.get(op), SelectOp) else None
        calls.append(OpCall(op_key(op, st.in_widths, st.width, st.params, select), op,
                            tuple(st.in_widths), st.width, st.params,
                            tuple(e.arg for e in st.inputs), select))
    return calls


# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------


@dataclass
class Fit:
    """``latency ≈ scale · Σ t(call) + per_call_ms · calls + const_ms`` for one space and
    setting, and what it was fitted on (the calibration children, timed end to end)."""

    scale: float
    per_call_ms: float
    const_ms: float
    archs: list[str] = field(default_factory=list)
    measured_ms: list[float] = field(default_factory=list)

    def __call__(self, ops_ms: float, calls: int) -> float:
        return self.scale * ops_ms + self.per_call_ms * calls + self.const_ms


#: The features of a :class:`GraphFit`, over a child's op calls: a constant, the calls,
#: the calls with multiply-adds (each a quantised matrix product and its (de)quantising
#: nodes in the int8 graph), and the multiply-adds and output elements summed.
GRAPH_FEATURES = ("const", "calls", "product_calls", "macs", "outputs")


@dataclass
class GraphFit:
    """``latency ≈ Σ coef · feature`` (:data:`GRAPH_FEATURES`) of one space's children
    on an ONNX runtime at one setting; what it was fitted on, the children held out and
    its mean absolute percentage error on them, and the calibration's seconds."""

    coefs: list[float]
    archs: list[str] = field(default_factory=list)
    measured_ms: list[float] = field(default_factory=list)
    held_out: list[str] = field(default_factory=list)
    held_out_ms: list[float] = field(default_factory=list)
    held_out_predicted_ms: list[float] = field(default_factory=list)
    mape: float | None = None  # on the held-out children; None without any
    calibration_s: float = 0.0

    def __call__(self, features: Sequence[float]) -> float:
        return float(np.dot(self.coefs, features))

    def describe(self) -> str:
        """``held-out MAPE 7.1 % on 6 children, calibrated in 95.0 s``."""
        mape = ("no held-out children" if self.mape is None else
                f"held-out MAPE {100 * self.mape:.1f} % on {len(self.held_out)} children")
        return f"{mape}, calibrated in {self.calibration_s:.1f} s"


@dataclass
class LatencyTable:
    """Per setting, the time of each op call key; per space and setting, the :class:`Fit`
    (a ``torch`` table) or the :class:`GraphFit` (an ONNX runtime's)."""

    machine: dict[str, Any]
    clock: str = DEFAULT_CLOCK  # "unknown" for a table written before tables said it
    ops: dict[str, dict[str, float]] = field(default_factory=dict)
    fits: dict[str, dict[str, Fit]] = field(default_factory=dict)
    #: when it was last calibrated (UTC, ISO 8601 to the second); None: not recorded
    calibrated: str | None = None
    #: per setting key, the median relative IQR of the timings of its last calibration
    noise: dict[str, float] = field(default_factory=dict)
    #: what its milliseconds time (:data:`nas.timing.LATENCY_RUNTIMES`); a table
    #: written before tables said it is a torch one
    runtime: str = "torch"
    #: an ONNX runtime's fits, per space and setting
    graph_fits: dict[str, dict[str, GraphFit]] = field(default_factory=dict)

    @classmethod
    def new(cls, clock: str = DEFAULT_CLOCK, runtime: str = "torch") -> LatencyTable:
        _check_clock(clock)
        check_runtime(runtime)
        return cls({**machine(), "threads": []}, clock, runtime=runtime)

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {
            "format": TABLE_FORMAT, "machine": self.machine, "clock": self.clock,
            "calibrated": self.calibrated, "noise": self.noise, "ops": self.ops,
            "fits": {s: {k: asdict(f) for k, f in by.items()} for s, by in self.fits.items()},
            "runtime": self.runtime,
            "graph_fits": {s: {k: asdict(f) for k, f in by.items()}
                           for s, by in self.graph_fits.items()},
        })

    def describe(self, setting: Setting | None = None) -> str:
        """``clock cpu, calibrated 2026-11-27T19:02:11Z, noise 3.1 %``: how the table was
        made, at ``setting`` (the noisiest of its settings without one); "unknown" for
        what a table written before tables said it lacks."""
        if setting is not None:
            noise = self.noise.get(setting.key)
        else:
            noise = max(self.noise.values()) if self.noise else None
        spread = "noise unknown" if noise is None else f"noise {100 * noise:.1f} %"
        if noise is not None and noise > NOISY_SPREAD:
            spread += " (noisy: calibrated on a busy machine?)"
        runtime = "" if self.runtime == "torch" else f"runtime {self.runtime}, "
        return (f"{runtime}clock {self.clock}, calibrated {self.calibrated or 'unknown'}, "
                f"{spread} (median relative IQR of its repeated timings)")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LatencyTable:
        hold_shared(Path(path))  # a table in the cache: `nas cache clear` leaves it to the run
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            if data.get("format") != TABLE_FORMAT:
                raise LatencyError(
                    f"latency table {path} has format {data.get('format')!r}, this engine "
                    f"reads {TABLE_FORMAT}; calibrate again with `nas latency calibrate`")
            clock = data.get("clock", "unknown")  # not recorded by the first tables
            if clock != "unknown":
                _check_clock(clock)
            runtime = data.get("runtime", "torch")
            if runtime not in LATENCY_RUNTIMES:
                raise ValueError(f"unknown runtime {runtime!r}")
            return cls(dict(data["machine"]), clock,
                       {k: {op: float(t) for op, t in v.items()} for k, v in data["ops"].items()},
                       {s: {k: Fit(**f) for k, f in by.items()}
                        for s, by in data["fits"].items()},
                       data.get("calibrated"),
                       {k: float(v) for k, v in (data.get("noise") or {}).items()},
                       runtime,
                       {s: {k: GraphFit(**f) for k, f in by.items()}
                        for s, by in (data.get("graph_fits") or {}).items()})
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError,
                AttributeError, ValueError) as err:
            why = " ".join(f"{type(err).__name__}: {err}".split())[:120]
            raise LatencyError(f"latency table {path} is broken ({why}); "
                               f"{clear_hint(Path(path))}, or run `nas latency calibrate`"
                               ) from None


# ---------------------------------------------------------------------------
# prediction
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """A predicted latency and what it is made of."""

    latency_ms: float
    ops_ms: float  # Σ t(call), before the fitted scale and overhead
    calls: int
    estimated_calls: int  # calls whose key was never timed (estimated from similar ones)
    setting: Setting


class LatencyModel:
    """Predicts the CPU latency of children from a :class:`LatencyTable`."""

    def __init__(self, table: LatencyTable, path: Path | None = None) -> None:
        self.table = table
        self.path = path
        self._estimators: dict[str, Callable[[OpCall], float]] = {}

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None,
             clock: str = DEFAULT_CLOCK) -> LatencyModel:
        """This machine's table for ``clock`` (or ``path``); a table from another machine
        warns."""
        if path is None:
            path = default_table_path(clock)
            if not path.is_file():
                pattern = "*cores.json" if clock == "wall" else f"*-{clock}.json"
                others = sorted(path.parent.glob(pattern)) if path.parent.is_dir() else []
                if not others:
                    raise LatencyError(f"no latency table for this machine at {path}; run "
                                       f"`nas latency calibrate --clock {clock}` first")
                path = others[0]
        path = Path(path)
        if not path.is_file():
            raise LatencyError(f"latency table {path} does not exist; run "
                               f"`nas latency calibrate --table {path}`")
        table = LatencyTable.load(path)
        here = machine()
        made = {k: table.machine.get(k) for k in here}
        if made != here:
            warnings.warn(
                f"latency table {path} was calibrated on {made['cpu']} ({made['cores']} cores, "
                f"torch {made['torch']}), this is {here['cpu']} ({here['cores']} cores, torch "
                f"{here['torch']}): predictions may be off; run `nas latency calibrate`",
                MachineMismatchWarning, stacklevel=2)
        return cls(table, path)

    def explain(self, space: SearchSpace, arch: Mapping[str, Any] | None = None,
                batch_size: int = 1, seq_len: int = 128, threads: int = 1) -> Prediction:
        setting = Setting(batch_size, seq_len, threads)
        if self.table.runtime in ONNX_RUNTIMES:
            graph_fit = self._graph_fit(space, setting)
            features = graph_features(space, arch, setting)
            return Prediction(graph_fit(features), float("nan"), int(features[1]), 0, setting)
        fit = self._fit(space, setting)
        p = self.ops_ms(space, arch, setting)
        return Prediction(fit(p.ops_ms, p.calls), p.ops_ms, p.calls, p.estimated_calls, setting)

    def ops_ms(self, space: SearchSpace, arch: Mapping[str, Any] | None,
               setting: Setting) -> Prediction:
        """Σ t(call) over the child's op calls, before the fit (``latency_ms`` is nan)."""
        times = self.table.ops.get(setting.key, {})
        calls = op_calls(space, arch)
        ops_ms, estimated = 0.0, 0
        for call in calls:
            t = times.get(call.key)
            if t is None:
                t = self._estimator(setting)(call)
                estimated += 1
            ops_ms += t
        return Prediction(float("nan"), ops_ms, len(calls), estimated, setting)

    def predict(self, space: SearchSpace, arch: Mapping[str, Any] | None = None,
                batch_size: int = 1, seq_len: int = 128, threads: int = 1) -> float:
        """Predicted latency in milliseconds of one forward pass of ``arch``'s child."""
        return self.explain(space, arch, batch_size, seq_len, threads).latency_ms

    def predictor(self, space: SearchSpace, batch_size: int = 1, seq_len: int = 128,
                  threads: int = 1) -> Predictor:
        """``arch -> ms`` for one space and setting: the ``latency_fn`` of the evaluators
        (:class:`evaluators.penalty.PenaltyEvaluator`, :class:`evaluators.costs.CostEvaluator`)."""
        setting = Setting(batch_size, seq_len, threads)
        if self.table.runtime in ONNX_RUNTIMES:  # fail now, not mid-search
            self._graph_fit(space, setting)
        else:
            self._fit(space, setting)
        return Predictor(self, space, setting)

    def _fit(self, space: SearchSpace, setting: Setting) -> Fit:
        fit = self.table.fits.get(space_key(space), {}).get(setting.key)
        if fit is None:
            raise self._uncalibrated(space, setting)
        return fit

    def _graph_fit(self, space: SearchSpace, setting: Setting) -> GraphFit:
        fit = self.table.graph_fits.get(space_key(space), {}).get(setting.key)
        if fit is None:
            raise self._uncalibrated(space, setting)
        return fit

    def fit_note(self, space: SearchSpace, setting: Setting) -> str:
        """An ONNX table's held-out MAPE and calibration time for ``space`` at
        ``setting`` (:meth:`GraphFit.describe`); empty for a torch table."""
        if self.table.runtime not in ONNX_RUNTIMES:
            return ""
        return self._graph_fit(space, setting).describe()

    def _uncalibrated(self, space: SearchSpace, setting: Setting) -> LatencyError:
        where = f" in {self.path}" if self.path else ""
        if self.table.runtime in ONNX_RUNTIMES:
            again = (f"a run with latency runtime {self.table.runtime} calibrates it "
                     "(`nas cache clear latency` first if this table is stale)")
        else:
            again = (f"run `nas latency calibrate --spaces {space.name} --batch-sizes "
                     f"{setting.batch_size} --seq-lens {setting.seq_len} --threads "
                     f"{setting.threads}`")
        runtime = "" if self.table.runtime == "torch" else f" on {self.table.runtime}"
        return LatencyError(
            f"no latency calibration{runtime} for space {space.name!r} (this configuration) "
            f"at {setting.describe()}{where}; {again}")

    def _estimator(self, setting: Setting) -> Callable[[OpCall], float]:
        if setting.key not in self._estimators:
            self._estimators[setting.key] = _op_estimator(self.table.ops.get(setting.key, {}),
                                                          setting)
        return self._estimators[setting.key]


@dataclass(frozen=True, eq=False)
class Predictor:
    """``arch -> ms`` of one space at one setting, which knows its table
    (:func:`latency_source`)."""

    model: LatencyModel
    space: SearchSpace
    setting: Setting

    def __call__(self, arch: Mapping[str, Any]) -> float:
        s = self.setting
        return self.model.predict(self.space, arch, s.batch_size, s.seq_len, s.threads)

    def source(self) -> str:
        """The table this predicts from, how it was made, and how to make it again."""
        table, s = self.model.table, self.setting
        path = self.model.path
        where = f"latency table {path}" if path else "a latency table"
        clock = table.clock if table.clock in CLOCKS else DEFAULT_CLOCK
        table_flag = f"--table {path} " if path else ""
        again = (f"`nas latency calibrate {table_flag}--spaces {self.space.name} "
                 f"--batch-sizes {s.batch_size} --seq-lens {s.seq_len} --threads {s.threads} "
                 f"--clock {clock}`")
        cleared = path is not None and "nas cache clear" in clear_hint(path, "")
        if table.runtime in ONNX_RUNTIMES:  # `nas latency calibrate` times torch only
            again = ("`nas cache clear latency` (the next run calibrates again)" if cleared
                     else "delete it (the next run calibrates again)")
            fit = f"; {self.model.fit_note(self.space, s)}"
        else:
            fit = ""
            if cleared:
                again = f"`nas cache clear latency` (the next run calibrates again) or {again}"
        return (f"latency predicted by {where} ({table.describe(s)}{fit}); if it was "
                f"calibrated while the machine was busy, recalibrate: {again}")


def latency_source(latency_fn: Any) -> str | None:
    """What a refusal caused by predicted latency should say about the prediction
    (:meth:`Predictor.source`); ``None`` for a latency function that is not a table's."""
    return latency_fn.source() if isinstance(latency_fn, Predictor) else None


def _op_features(op: str, in_widths: Sequence[int], width: int, params: Mapping[str, Any],
                 setting: Setting) -> list[float]:
    """[1, multiply-adds, output elements] of one call at the setting's batch and length."""
    tokens = setting.batch_size * setting.seq_len
    macs = OPS.get(op).count_macs(list(in_widths), width, params, setting.seq_len)
    return [1.0, float(setting.batch_size * macs), float(tokens * width)]


def graph_features(space: SearchSpace, arch: Mapping[str, Any] | None,
                   setting: Setting) -> list[float]:
    """A child's :data:`GRAPH_FEATURES` at ``setting`` (what a :class:`GraphFit`
    weighs)."""
    calls, products, macs, outputs = 0, 0, 0.0, 0.0
    for call in op_calls(space, arch):
        _, m, o = _op_features(call.op, call.in_widths, call.width, call.params, setting)
        calls, products, macs, outputs = calls + 1, products + (m > 0), macs + m, outputs + o
    return [1.0, float(calls), float(products), macs, outputs]


def _op_estimator(times: Mapping[str, float], setting: Setting) -> Callable[[OpCall], float]:
    """Time of an untimed call: a non-negative least-squares line over the timed calls of
    the same op (three or more), else over all timed calls."""
    rows: dict[str, list[tuple[list[float], float]]] = {}
    for key, t in times.items():
        op, in_widths, width, params, _ = json.loads(key)
        rows.setdefault(op, []).append((_op_features(op, in_widths, width, params, setting), t))
    everything = [r for rs in rows.values() for r in rs]
    coefs = {op: _nnls(rs) for op, rs in rows.items() if len(rs) >= 3}
    overall = _nnls(everything) if everything else np.zeros(3)

    def estimate(call: OpCall) -> float:
        x = _op_features(call.op, call.in_widths, call.width, call.params, setting)
        return float(np.dot(coefs.get(OPS.get(call.op).name, overall), x))

    return estimate


def _nnls(rows: Sequence[tuple[Sequence[float], float]]) -> np.ndarray:
    """Non-negative least squares with columns scaled to 1 (they differ by 10⁹)."""
    a = np.array([x for x, _ in rows], dtype=np.float64)
    y = np.array([t for _, t in rows], dtype=np.float64)
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(a / scale, y)
    return coef / scale


# ---------------------------------------------------------------------------
# calibration
# ---------------------------------------------------------------------------


def calibration_archs(space: SearchSpace, n: int, seed: int = 0) -> list:
    """``n`` distinct seeded draws to fit the overhead on, the smallest and the largest
    (by multiply-adds) of ``4n`` draws among them so the fit spans the space."""
    from nas.cost import count_costs

    rng = np.random.default_rng(seed)
    draws: dict[str, Any] = {}
    for _ in range(1 if space.is_fixed else 4 * n):
        arch = space.sample(rng)
        draws.setdefault(arch.id, arch)
    pool = list(draws.values())
    by_size = sorted(pool, key=lambda a: count_costs(space, a, 128).macs)
    picked = {a.id: a for a in (by_size[0], by_size[-1])}
    for arch in pool:
        if len(picked) >= n:
            break
        picked.setdefault(arch.id, arch)
    return list(picked.values())[:n]


def op_keys(space: SearchSpace, pool: int = 200, seed: int = 0) -> dict[str, OpCall]:
    """The op call keys of ``pool`` seeded draws (one call for each key)."""
    rng = np.random.default_rng(seed)
    calls: dict[str, OpCall] = {}
    for _ in range(1 if space.is_fixed else pool):
        for call in op_calls(space, space.sample(rng)):
            calls.setdefault(call.key, call)
    return calls


@torch.no_grad()
def time_op(call: OpCall, space: SearchSpace, setting: Setting, repeats: int = 10,
            budget_s: float = 0.25, clock: str = "wall") -> float:
    """Median milliseconds of one op call at ``setting``, on random inputs: the op built
    alone at its widths, its inputs random ``(batch, length, width)`` states and the
    batch's token ids (at most ``repeats`` runs after two warm-up runs, fewer past
    ``budget_s``)."""
    return _timed(_op_runner(call, space, setting), repeats, budget_s, clock)[0]


def _op_runner(call: OpCall, space: SearchSpace, setting: Setting) -> Callable[[], Any]:
    """One call of ``call``'s op, built alone at its widths, on seeded random inputs."""
    from nas.cost import batch_for

    module = OPS.get(call.op)(list(call.in_widths), call.width, dict(call.params)).eval()
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(setting.batch_size, setting.seq_len, w, generator=g)
          for w in call.in_widths]
    ctx = Context(batch_for(space, setting.batch_size, setting.seq_len))
    if isinstance(module, SelectOp):
        if call.select_value is None:
            raise ValueError(f"{call.key}: a selector's call names no depth")
        value = call.select_value

        def run() -> Any:
            return module.forward_value(xs, list(call.args), value, call.width, call.params,
                                        ctx)
    else:
        def run() -> Any:
            return module(xs, call.width, call.params, ctx)
    return run


def calibrate(spaces: Sequence[SearchSpace], settings: Sequence[Setting], *,
              archs: int = 10, pool: int = 200, repeats: int = 10, end_to_end: int = 10,
              seed: int = 0, clock: str = DEFAULT_CLOCK, table: LatencyTable | None = None,
              log: Callable[[str], None] | None = None) -> LatencyTable:
    """Time the op calls of each space and fit its overhead at each setting (see the
    module docstring); adds to ``table`` (a new one by default) and returns it.

    ``pool`` draws give the op keys to time (each once per setting); ``archs`` children
    timed end to end (:func:`time_child`, at most ``end_to_end`` runs) give the fit.
    """
    from nas.builder import build_child
    from nas.cost import batch_for

    _check_clock(clock, settings)
    if table is not None and table.clock != clock:
        raise LatencyError(f"the table measures the {table.clock} clock, not {clock}")
    table = table or LatencyTable.new(clock)
    table.machine = {**machine(), "threads": sorted(
        set(table.machine.get("threads", [])) | {s.threads for s in settings})}
    table.calibrated = _now()
    for setting in settings:
        times = table.ops.setdefault(setting.key, {})
        spreads: list[float] = []
        with torch_threads(setting.threads):
            for space in spaces:
                failed = 0
                for key, call in op_keys(space, pool, seed).items():
                    if key not in times:
                        try:
                            with torch.no_grad():
                                times[key], spread = _timed(_op_runner(call, space, setting),
                                                            repeats, 0.25, clock)
                            spreads.append(spread)
                        except Exception:  # noqa: BLE001 - estimated instead, and counted
                            failed += 1
                model = LatencyModel(table)
                rows = []
                picked = calibration_archs(space, archs, seed)
                for arch in picked:
                    child = build_child(space, arch).eval()
                    batch = batch_for(space, setting.batch_size, setting.seq_len)
                    measured, spread = _time_child(child, batch, end_to_end, 2.0, clock)
                    spreads.append(spread)
                    p = model.ops_ms(space, arch, setting)
                    rows.append(([p.ops_ms, float(p.calls), 1.0], measured))
                fit = _fit_overhead(rows, [a.id for a in picked])
                table.fits.setdefault(space_key(space), {})[setting.key] = fit
                if log:
                    log(f"{space.name:<16} {setting.describe()}: {len(times)} op keys"
                        f"{f' ({failed} failed to time)' if failed else ''}; {len(picked)} "
                        f"children: latency = {fit.scale:.3f} x ops + "
                        f"{fit.per_call_ms * 1000:.1f} us x calls + {fit.const_ms:.2f} ms")
        _record_noise(table, setting, spreads)
    return table


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _record_noise(table: LatencyTable, setting: Setting, spreads: Sequence[float]) -> None:
    """Keep the setting's noise (the median of its points' relative IQRs) in the table
    and warn when it is above :data:`NOISY_SPREAD`: the predictions of a table timed on
    a busy machine are off by the load of that moment."""
    if not spreads:
        return
    noise = statistics.median(spreads)
    table.noise[setting.key] = noise
    if noise > NOISY_SPREAD:
        message = (f"latency calibration at {setting.describe()} is noisy: the median "
                   f"relative IQR of {len(spreads)} timed points is {100 * noise:.1f} % "
                   f"(above {100 * NOISY_SPREAD:.0f} %; the machine was probably busy), "
                   f"recorded in the table; its predictions may be off: recalibrate on a "
                   f"quieter machine"
                   + (", or use --clock cpu" if table.clock == "wall" else ""))
        log.warning(message)


@torch.no_grad()
def time_forward(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], warmup: int,
                 repeats: int) -> dict[str, float]:
    """Median milliseconds of an inference forward pass on every clock (cf.
    :func:`nas.cost.measure_latency`, which reports the wall clock)."""
    model.eval()
    return time_runs(lambda: model(batch), warmup, repeats)


def time_child(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], repeats: int = 10,
               budget_s: float = 2.0, clock: str = "wall") -> float:
    """Median milliseconds of a child's forward pass after three warm-up runs (the first
    two of a fresh model are slow), over ``repeats`` runs or fewer past ``budget_s``
    (at least three)."""
    return _time_child(model, batch, repeats, budget_s, clock)[0]


@torch.no_grad()
def _time_child(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], repeats: int,
                budget_s: float, clock: str) -> tuple[float, float]:
    """:func:`time_child`'s median and the relative IQR of its runs."""
    model.eval()
    return _timed(lambda: model(batch), repeats, budget_s, clock)


def _fit_overhead(rows: Sequence[tuple[list[float], float]], archs: list[str]) -> Fit:
    """The fit minimising the relative squared error (:func:`_relative_nnls`)."""
    scale, per_call, const = _relative_nnls(rows)
    return Fit(float(scale), float(per_call), float(const), archs, [y for _, y in rows])


def _relative_nnls(rows: Sequence[tuple[Sequence[float], float]]) -> np.ndarray:
    """Non-negative coefficients minimising the *relative* squared error (each row
    divided by its measurement), as MAPE weighs a small child's error like a large one's."""
    return _nnls([([x / y for x in xs], 1.0) for xs, y in rows])


def calibrate_graph(space: SearchSpace, setting: Setting, runtime: str = "onnx-int8", *,
                    archs: int = 16, held_out: int = 6, repeats: int = 20,
                    budget_s: float = 1.0, seed: int = 0, clock: str = DEFAULT_CLOCK,
                    table: LatencyTable | None = None,
                    log: Callable[[str], None] | None = None) -> LatencyTable:
    """Fit ``space``'s :class:`GraphFit` on ``runtime`` at ``setting``: ``archs + held_out``
    seeded children (:func:`calibration_archs`: the smallest and largest among the fitted
    ones), each exported to ONNX in a temporary folder (:func:`nas.onnx_latency.child_graph`)
    and timed on ONNX Runtime at one thread (median of at most ``repeats`` runs within
    ``budget_s``); the first ``archs`` fit it, the last ``held_out`` measure its MAPE.
    Adds to ``table`` (a new one by default) and returns it."""
    import tempfile

    from nas.builder import build_child
    from nas.onnx_latency import child_graph, graph_runner, vocab_of

    if runtime not in ONNX_RUNTIMES:
        raise LatencyError(f"runtime {runtime!r} has no graph calibration; use one of "
                           f"{', '.join(ONNX_RUNTIMES)}")
    _check_clock(clock, [setting])
    if table is not None and (table.clock, table.runtime) != (clock, runtime):
        raise LatencyError(f"the table measures {table.runtime} on the {table.clock} clock, "
                           f"not {runtime} on {clock}")
    table = table or LatencyTable.new(clock, runtime)
    table.machine = {**machine(), "threads": sorted(
        set(table.machine.get("threads", [])) | {setting.threads})}
    table.calibrated = _now()
    start = time.perf_counter()
    picked = calibration_archs(space, archs + held_out, seed)
    rows, spreads = [], []
    with torch_threads(setting.threads), tempfile.TemporaryDirectory(prefix="nas-latency-") as tmp:
        for i, arch in enumerate(picked):
            child = build_child(space, arch).eval()
            path = child_graph(child, Path(tmp) / str(i), runtime)
            run = graph_runner(path, setting.batch_size, setting.seq_len, vocab_of(child))
            measured, spread = _timed(run, repeats, budget_s, clock)
            spreads.append(spread)
            rows.append((graph_features(space, arch, setting), measured))
    n_fit = min(archs, len(rows))
    fit = GraphFit([float(c) for c in _relative_nnls(rows[:n_fit])],
                   [a.id for a in picked[:n_fit]], [y for _, y in rows[:n_fit]])
    fit.held_out = [a.id for a in picked[n_fit:]]
    fit.held_out_ms = [y for _, y in rows[n_fit:]]
    fit.held_out_predicted_ms = [fit(x) for x, _ in rows[n_fit:]]
    if fit.held_out:
        fit.mape = statistics.mean(abs(p - y) / y for p, y in
                                   zip(fit.held_out_predicted_ms, fit.held_out_ms, strict=True))
    fit.calibration_s = round(time.perf_counter() - start, 1)
    table.graph_fits.setdefault(space_key(space), {})[setting.key] = fit
    _record_noise(table, setting, spreads)
    if log:
        log(f"{space.name:<16} {setting.describe()} on {runtime}: {n_fit} children fitted; "
            f"{fit.describe()}")
    return table


def space_predictor(space: SearchSpace, *, batch_size: int = 1, seq_len: int = 128,
                    threads: int = 1, clock: str = DEFAULT_CLOCK,
                    log: Callable[[str], None] | None = None,
                    calibration: Mapping[str, Any] | None = None,
                    runtime: str = "torch") -> Predictor:
    """``arch -> ms`` for ``space`` on this machine, from the cached latency table
    (:func:`default_table_path`, the cache's ``latency`` kind). A table without a fit
    for this space and setting, or no table, is calibrated once (:func:`calibrate`, its
    defaults) and saved in the cache under the table's lock, so a second process waits
    and then reads it; ``log`` says which it was, with the calibration's time. A table
    from another machine is replaced, as ``nas latency calibrate`` does. ``runtime``: what
    the milliseconds time (:data:`nas.timing.LATENCY_RUNTIMES`); an ONNX runtime's
    table is its own file, calibrated by :func:`calibrate_graph` (``calibration``: its
    keywords then)."""
    setting = Setting(batch_size, seq_len, threads)
    path = default_table_path(clock, runtime=runtime)
    path.parent.mkdir(parents=True, exist_ok=True)
    graph = runtime in ONNX_RUNTIMES

    def fitted(table: LatencyTable) -> bool:
        return _fits(table, space, setting, graph)

    def ours(table: LatencyTable) -> bool:
        return _ours(table, clock, runtime)

    def described(table: LatencyTable) -> str:
        """How the table was made, with an ONNX fit's held-out MAPE and seconds."""
        fit = LatencyModel(table).fit_note(space, setting)
        return table.describe(setting) + (f"; {fit}" if fit else "")

    def calibrated(table: LatencyTable | None) -> LatencyTable:
        if graph:
            return calibrate_graph(space, setting, runtime, clock=clock, table=table,
                                   **dict(calibration or {}))
        return calibrate([space], [setting], clock=clock, table=table,
                         **dict(calibration or {}))

    table = LatencyTable.load(path) if path.is_file() else None
    if table is None or not (ours(table) and fitted(table)):
        from nas.cache import exclusive

        with exclusive(path.with_name(f".{path.name}.lock"), f"latency calibration {path}"):
            table = LatencyTable.load(path) if path.is_file() else None
            table = table if table is not None and ours(table) else None
            if table is None or not fitted(table):
                start = time.perf_counter()
                table = calibrated(table)
                table.save(path)
                if log:
                    log(f"latency model: no table for space {space.name!r} at "
                        f"{setting.describe()}{f' on {runtime}' if graph else ''} on this "
                        f"machine; calibrated in {time.perf_counter() - start:.1f} s and "
                        f"cached in {path} ({described(table)})")
            elif log:
                log(f"latency model: {path} (calibrated by another process; "
                    f"{described(table)})")
    elif log:
        log(f"latency model: {path} (cached; {described(table)})")
    return LatencyModel(table, path).predictor(space, batch_size, seq_len, threads)


def _fits(table: LatencyTable, space: SearchSpace, setting: Setting, graph: bool = False
          ) -> bool:
    """Whether ``table`` has a fit for ``space`` at ``setting`` (``graph``: an ONNX
    runtime's end-to-end fit)."""
    fits = table.graph_fits if graph else table.fits
    return setting.key in fits.get(space_key(space), {})


def _ours(table: LatencyTable, clock: str, runtime: str = "torch") -> bool:
    """Whether ``table`` was made on this machine with ``clock`` on ``runtime``."""
    here = machine()
    return ({k: table.machine.get(k) for k in here} == here and table.clock == clock
            and table.runtime == runtime)


def cached_predictor(space: SearchSpace, *, batch_size: int = 1, seq_len: int = 128,
                     threads: int = 1, clock: str = DEFAULT_CLOCK,
                     runtime: str = "torch") -> Predictor | None:
    """:func:`space_predictor`'s answer when this machine's cached table already fits
    ``space`` at the setting, else ``None``: nothing is calibrated or written
    (``nas run --dry-run`` checks a latency limit only on a table it finds)."""
    setting = Setting(batch_size, seq_len, threads)
    path = default_table_path(clock, runtime=runtime)
    table = LatencyTable.load(path) if path.is_file() else None
    if table is None or not (_ours(table, clock, runtime)
                             and _fits(table, space, setting, runtime in ONNX_RUNTIMES)):
        return None
    return LatencyModel(table, path).predictor(space, batch_size, seq_len, threads)


def calibration_seconds(space: SearchSpace, *, archs: int = 10, pool: int = 200,
                        seed: int = 0) -> float:
    """The most a calibration of ``space`` with :func:`calibrate`'s defaults spends
    timing: 0.25 s for each op key its ``pool`` draws give and 2 s for each of the
    ``archs`` children timed end to end (their time budgets; small ops finish sooner)."""
    return 0.25 * len(op_keys(space, pool, seed)) + 2.0 * archs
