"""Kill-and-resume at random instants (docs/optuna.md#exact-resume): a study's process is
killed (``os._exit``, nothing cleaned up) just before one of its storage writes, picked at
random, then the study is resumed in this process, and the architectures it evaluated,
with their outcomes and values, are compared with an uninterrupted run's.

``--instants params`` (the default) kills only inside the writes of a trial's parameters
(Optuna records them one write each: after k of a trial's n), the instant that used to
change the sequence; ``--instants writes`` before any write once the study exists (its
attributes and queued architectures, trial creation, parameters, attributes, states,
reports). The cases are cheap studies of the ``costs``
evaluator (each trial milliseconds), one per kind of search:

* ``tpe``: TPE on AdaBERT's small space, one objective (parameters), seeds queued first;
* ``lamoo``: LaMOO, two objectives (parameters and FLOPs);
* ``compress``: the study of ``nas run`` with the compress method: TPE, two objectives, a
  ``max_params`` budget (infeasible trials recorded) and the sorted teacher's truncations
  queued first, on the BERT sub-network space (small configuration).

Run: ``python benchmarks/kill_resume.py [--kills 12] [--seed 0] [--instants params]``;
it prints one line per kill and ``N/N identical``. ``tests/test_exact_resume.py`` runs
one fixed kill per case, and the full script in the slow suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path: put the repository root
# there instead, so that `import searchers` finds the package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import optuna  # noqa: E402
from optuna.storages import JournalStorage  # noqa: E402
from optuna.storages.journal import JournalFileBackend  # noqa: E402

from evaluators.costs import CostEvaluator  # noqa: E402
from nas.cost import count_costs  # noqa: E402
from nas.space import SearchSpace, get_space, small_config  # noqa: E402
from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)

CASES = ("tpe", "lamoo", "compress")
N_TRIALS = 8
SEQ_LEN = 16
#: the exit status of a killed child (any but 0, 1 and 2 would do)
KILLED = 86
#: the storage writes a kill may come before (``--instants writes``)
WRITES = ("set_study_user_attr", "set_study_system_attr", "create_new_trial",
          "set_trial_param", "set_trial_state_values", "set_trial_user_attr",
          "set_trial_system_attr", "set_trial_intermediate_value")
#: random start-up trials (sampled one parameter at a time: where a partly written trial
#: went wrong) and then the model's
SAMPLERS = {"tpe": {"n_startup_trials": 4},
            "lamoo": {"n_startup_trials": 2, "rebuild_every": 1, "leaf_size": 1}}


def parts(case: str) -> tuple[SearchSpace, CostEvaluator, StudySettings, list]:
    """The space, evaluator, settings and queued architectures of ``case``."""
    if case == "compress":
        from spaces.bert_subnet import truncation

        space = get_space("bert-subnet", **small_config("bert-subnet"))
        limit = 0.8 * count_costs(space, space.default(), SEQ_LEN).params
        queue = [(f"first-{k}", truncation(space, k)) for k in (1, 2)]
        return (space, CostEvaluator(space, ("params", "macs"), seq_len=SEQ_LEN),
                StudySettings(samplers=SAMPLERS, max_params=limit), queue)
    space = get_space("adabert", **small_config("adabert"))
    objectives = ("params",) if case == "tpe" else ("params", "flops")
    return (space, CostEvaluator(space, objectives, seq_len=SEQ_LEN),
            StudySettings(samplers=SAMPLERS, seeds=["default", "smallest"]), [])


def run(case: str, run_dir: str | Path, resume: bool = False) -> optuna.Study:
    """``case``'s study in ``run_dir`` (its journal file), started or resumed."""
    space, evaluator, settings, queue = parts(case)
    searcher = "lamoo" if case == "lamoo" else "tpe"
    spec = StudySpec.for_run(searcher=searcher, name=case, run_dir=run_dir, seed=0,
                             settings=settings, options=StudyOptions(n_trials=N_TRIALS),
                             default_trials=N_TRIALS, resume=resume, seq_len=SEQ_LEN)
    return run_study(spec, space, evaluator, queue=queue)


def sequence(study: optuna.Study) -> list[tuple[Any, ...]]:
    """What the study did, in the order it finished: (architecture id, outcome, values)
    of every evaluation and every infeasible, rejected or repeated proposal."""
    done = sorted((t for t in study.get_trials(deepcopy=False) if t.state.is_finished()
                   and t.user_attrs.get("outcome") is not None),
                  key=lambda t: (t.datetime_complete, t.number))
    return [(t.user_attrs.get("arch_id"), t.user_attrs["outcome"], tuple(t.values or ()))
            for t in done]


def count_writes(names: tuple[str, ...], on_write: Callable[[int, list], None]) -> None:
    """Call ``on_write(n, what)`` before the n-th (from 0) write among the journal
    storage's methods ``names``, in this process; ``what``: the method, the study's or
    trial's id and the attribute or parameter name (``None`` for other writes)."""
    count = [0]
    for name in names:
        original = getattr(JournalStorage, name)

        def wrapped(self: JournalStorage, *args: Any, _original: Any = original,
                    _name: str = name, **kwargs: Any) -> Any:
            key = args[1] if len(args) > 1 and isinstance(args[1], str) else None
            on_write(count[0], [_name, args[0], key])
            count[0] += 1
            return _original(self, *args, **kwargs)

        setattr(JournalStorage, name, wrapped)


def writes_of(case: str, names: tuple[str, ...], folder: Path) -> tuple[list, list]:
    """The uninterrupted run's sequence and its writes among ``names`` (each ``[method,
    id, name]``; run in a child, so that this process's storage class stays as it is)."""
    out = subprocess.run([sys.executable, __file__, "--child", case,  # noqa: S603 (this file)
                          str(folder), "-1", "--instants", ",".join(names)],
                         capture_output=True, text=True, check=True)
    study = optuna.load_study(study_name=f"{case}-{searcher_of(case)}",
                              storage=JournalStorage(JournalFileBackend(
                                  str(folder / "study.journal"))))
    return sequence(study), json.loads(out.stdout.splitlines()[-1])


def searcher_of(case: str) -> str:
    return "lamoo" if case == "lamoo" else "tpe"


def killed_then_resumed(case: str, folder: Path, at: int, names: tuple[str, ...]) -> list:
    """Kill ``case``'s study in a child just before its ``at``-th write among ``names``,
    resume it here, and return the resumed study's sequence."""
    child = subprocess.run([sys.executable, __file__, "--child", case,  # noqa: S603 (this file)
                            str(folder), str(at), "--instants", ",".join(names)],
                           capture_output=True, text=True)
    if child.returncode != KILLED:
        raise RuntimeError(f"the child was not killed (exit {child.returncode}): "
                           f"{child.stderr[-2000:]}")
    return sequence(run(case, folder, resume=True))


def _child(case: str, folder: str, at: int, names: tuple[str, ...]) -> None:
    """A study killed before its ``at``-th write; ``-1``: never, and it prints its writes
    as one JSON line."""
    seen: list = []

    def on_write(n: int, what: list) -> None:
        if n == at:
            os._exit(KILLED)  # as kill -9: no clean-up, no exception handler runs
        seen.append(what)

    count_writes(names, on_write)
    run(case, folder)
    print(json.dumps(seen))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=12, help="kills in all, spread over "
                        "the cases (default 12)")
    parser.add_argument("--seed", type=int, default=0, help="the generator of the instants")
    parser.add_argument("--instants", default="params",
                        help="params (inside a trial's parameter writes) or writes (before "
                        "any storage write); the child takes a comma list of methods")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--child", nargs=3, metavar=("CASE", "FOLDER", "AT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = {"params": ("set_trial_param",), "writes": WRITES}.get(
        args.instants, tuple(args.instants.split(",")))
    if args.child:
        case, folder, at = args.child
        _child(case, folder, int(at), names)
        return 0
    return report(args.cases.split(","), args.kills, args.seed, names)


def report(cases: list[str], kills: int, seed: int, names: tuple[str, ...]) -> int:
    """Run ``kills`` kills over ``cases`` at random instants; print and return the number
    that differed."""
    rng = np.random.default_rng(seed)
    same = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            expected, log = writes_of(case, names, Path(tmp) / f"{case}-straight")
            writes = len(log)
            share = kills // len(cases) + (i < kills % len(cases))
            for j, at in enumerate(sorted(rng.choice(writes, size=share, replace=False))):
                got = killed_then_resumed(case, Path(tmp) / f"{case}-{j}", int(at), names)
                ok = got == expected
                same += ok
                total += 1
                method, where, key = log[at]
                print(f"{case}: killed before write {at} of {writes} ({method} {where}"
                      f"{'' if key is None else ' ' + key}): "
                      f"{'identical' if ok else 'DIFFERENT'}", flush=True)
    print(f"{same}/{total} identical")
    return total - same


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
