"""Exact resume of a multi-trial study (docs/reference.md#optuna): a trial's *proposal
index*, its place in the sequence the uninterrupted search would have made.

A worker killed during a trial leaves a RUNNING trial; the next worker that looks fails
it and queues a retry with the same parameters (:mod:`searchers.storage`, Optuna's
:class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`). The retry is a *new* trial,
so its number, and the number of every later trial, is one higher than in the
uninterrupted run. Every random draw of a proposal (the per-trial sampler seeds of
:mod:`searchers.optuna_searchers`, LaNAS's draws, the fallback architectures) is
therefore seeded by the proposal index instead of the raw trial number:

* a trial that is not a retry has the index "trials before it that are not retries";
* a retry has the index of the first trial it retries (system attribute
  ``failed_trial``).

In a run that was never interrupted there are no retries, so the index *is* the trial
number and nothing changes. After a kill, the failed trial and its retry share an index,
and every later proposal gets the index, hence the seed, it had in the uninterrupted run.
:func:`next_waiting` gives the waiting trial with the lowest index, so a retry runs before
the seed architectures still queued behind the killed one, as in the uninterrupted run.

A kill can also come while a trial is proposed. Its proposal is written in one record
(:data:`PROPOSAL`, :func:`searchers.storage.propose_once`) before its parameters, which
Optuna writes one by one, so the retry proposes the same architecture; without it (killed
before), it draws again from the same proposal index. :func:`given_architecture` says
which retries skip the repeat check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

#: The system attribute of a retry: the number of the first trial it retries (Optuna's).
RETRY_OF = "failed_trial"
#: The system attribute that holds a sampled trial's whole proposal
#: (:func:`searchers.storage.propose_once`)
PROPOSAL = "proposal"


def proposal_index(trials: Sequence[FrozenTrial], number: int,
                   system_attrs: Mapping[str, Any]) -> int:
    """The proposal index of trial ``number`` (with system attributes ``system_attrs``)
    among the study's ``trials`` (module docstring)."""
    root = int(system_attrs.get(RETRY_OF, number))
    return sum(1 for t in trials if t.number < root and RETRY_OF not in t.system_attrs)


def next_waiting(trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """The waiting (queued) trial that comes first in the uninterrupted sequence, when it
    is a retry that Optuna's queue (lowest trial number first) would run too late;
    ``None`` when Optuna's own order is right."""
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    if not waiting:
        return None
    first = min(waiting, key=lambda t: (proposal_index(trials, t.number, t.system_attrs),
                                        t.number))
    return first if first.number != min(t.number for t in waiting) else None


def given_architecture(system_attrs: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Whether a trial's architecture was given rather than proposed by the sampler, so
    that it is evaluated even if it repeats one (a queued seed or fallback, and a retry
    of one: Optuna's ``fixed_params``).

    A retry of a *sampled* trial is proposed again (its :data:`PROPOSAL`, or, killed
    before it had one, drawn again from the same proposal index) and judged as the
    original was: a repeat in the uninterrupted run is a repeat again. A retry made
    before proposals were recorded in one write holds the killed trial's parameters and
    no proposal; it is evaluated, as it was then."""
    if "fixed_params" in system_attrs:
        return True
    return RETRY_OF in system_attrs and PROPOSAL not in system_attrs and bool(params)
