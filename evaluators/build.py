"""Build a registered evaluator from its name: the one way a recipe (or the generic search
method) turns ``evaluator: {name: ..., settings: {...}}`` into an :class:`Evaluator`.

``build_evaluator(name, settings, scoring_data, **parts)``:

* ``name`` is looked up in :data:`~evaluators.base.EVALUATORS`;
* ``settings`` (the experiment file's mapping) is checked against the evaluator's
  ``settings_type()`` (:mod:`evaluators.settings`): an unknown key, a missing one or a
  wrong type is a one-line :class:`~nas.config.ConfigError` naming it and the allowed keys;
* ``scoring_data`` is the task's :class:`~evaluators.base.ScoringData` (validation and
  latency batches, metric, ``seq_len``; a :class:`~evaluators.base.FullTrainingData` adds
  the report split's batches and ``init``), as a recipe's task context gives it;
* ``parts`` are what the run provides beyond data and settings: the space, the
  training's batches and losses, the run's seed and folders. A missing or unknown part
  is a one-line :class:`~evaluators.base.EvaluatorError` naming the evaluator's parts
  (``Evaluator.parts()``).

The built-in evaluators' parts (required; optional):

====================  ===================================================================
costs                 ``space``; ``latency_fn``
penalty               ``space``, ``inner`` (the evaluator it wraps); ``latency_fn``
distilled-retrain     ``space``, ``train_batches``, ``steps_per_epoch``, ``loss``;
                      ``test_batches``, ``init``, ``seed``, ``workdir``,
                      ``latency_repeats``, ``progress``
warmup-kd             ``space``, ``supernet``, ``task_batches``, ``task_steps_per_epoch``,
                      ``task_loss``; ``text_batches``, ``text_steps_per_epoch``,
                      ``text_loss``, ``seed``, ``latency_repeats``, ``progress``
progressive-transfer  ``space``, ``teacher``, ``batches``, ``steps_per_epoch``,
                      ``logits``; ``test_batches``, ``init``, ``seed``, ``workdir``,
                      ``latency_repeats``, ``progress``
inherited             ``space``, ``supernet`` (trained weight-sharing network)
blockwise             ``space``, ``table`` (the teacher's
                      :class:`~evaluators.blockwise.BlockTable`)
inherited-kd          ``space``, ``supernet`` (the sorted teacher's), ``train_batches``,
                      ``steps_per_epoch``, ``logits_loss``; ``test_batches``, ``init``,
                      ``seed``, ``workdir``, ``latency_repeats``, ``progress``
tabular               ``space`` (a tabular benchmark, :mod:`nas.pool`); ``seed`` (noise)
====================  ===================================================================

A training evaluator's parts other than ``space`` and the run options are fields of its
task (:class:`~evaluators.retrain.RetrainTask`...), whose scoring fields come from
``scoring_data``. An evaluator without a ``settings_type()`` takes no settings and is
built as ``cls(**parts)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaluators.base import EVALUATORS, Evaluator, EvaluatorError, ScoringData


def build_evaluator(name: str, settings: Mapping[str, Any] | None, scoring_data: ScoringData,
                    **parts: Any) -> Evaluator:
    """The registered evaluator ``name`` with its checked ``settings``, the task's
    ``scoring_data`` and the run's ``parts`` (see the module docstring)."""
    from nas.config import ConfigError, from_dict

    cls = EVALUATORS.get(name)
    settings_type = cls.settings_type()
    where = f"evaluator {name!r} settings"
    if settings_type is None:
        if settings:
            raise ConfigError(f"{where}: unknown key {sorted(settings)[0]!r}; "
                              f"{name!r} takes no settings")
        typed: Any = None
    else:
        typed = from_dict(settings_type, dict(settings or {}), where)
    required, optional = cls.parts()
    missing = [p for p in required if p not in parts]
    unknown = sorted(set(parts) - {*required, *optional})
    if missing or unknown:
        what = f"missing part {missing[0]!r}" if missing else f"unknown part {unknown[0]!r}"
        raise EvaluatorError(
            f"evaluator {name!r}: {what}; it takes {', '.join(required) or 'none'}"
            f"{' (optional: ' + ', '.join(optional) + ')' if optional else ''}")
    return cls.from_settings(typed, scoring_data, **parts)


__all__ = ["build_evaluator"]
