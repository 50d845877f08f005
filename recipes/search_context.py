"""The context of ``method: search``: stages 1–2 plus the space, the held-out part that
scores candidates and the parts an evaluator asks for (:meth:`SearchContext.evaluator`,
an evaluator by name)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from nas.config import ConfigError
from nas.device import table_rows
from nas.distill.losses import kd_loss
from nas.timing import ONNX_RUNTIMES
from recipes.common import (
    TaskContext,
)
from recipes.search_config import (
    Distillation,
    SearchConfig,
    check_evaluator,
    evaluator_settings,
)


class SearchContext(TaskContext[SearchConfig]):
    """Stages 1–2 plus the space (built for the task's labels and the teacher's
    vocabulary), the held-out part that scores candidates, and the training pieces every
    evaluator shares."""

    stage_count = 5

    def prepare(self) -> SearchContext:
        super().prepare()
        self.search_train, self.search_val = self.carve_validation()
        self.space, self.space_kwargs = self.make_space()
        self._check_head()
        return self

    def make_space(self) -> tuple[Any, dict[str, Any]]:
        """``(space, its factory's arguments)``: the configured space, built for the
        task's labels and the teacher's vocabulary (compress builds it from the teacher)."""
        return self.cfg.build_space(self.train.num_labels, len(self.tokenizer))

    def final_train(self) -> Any:
        """What the final retrain trains on (:class:`FinalSettings` ``train_examples``):
        the training subset, the whole train split or a seeded N rows of it; the cut is
        logged once."""
        n = self.cfg.final.train_examples
        if n is None:
            return self.train
        if not hasattr(self, "_final_train"):
            from recipes.common import seeded_subset

            self._final_train = self.full_train if n == "all" else seeded_subset(
                self.full_train, int(n), self.seed, "final-data", "final.train_examples")
            self.run.log("final_data", rows=len(self._final_train),
                         of=len(self.full_train), setting=n)
        return self._final_train

    def teacher_latency_ms(self) -> float | None:
        """The teacher's batch-1 latency on the scale of the study's ``latency_ms``, which
        ``final.select: latency_ratios`` divides by each ratio: on torch the one timed in
        stage 1, as each candidate's is timed by its evaluator; on an ONNX runtime its
        graph timed there once (:meth:`teacher_runtime_ms`)."""
        if self.cfg.latency_settings.runtime in ONNX_RUNTIMES:
            return self.teacher_runtime_ms()
        latency = (self.run.load_json("teacher.json") or {}).get("latency", {})
        return latency.get("batch1", {}).get("median_ms")

    def teacher_runtime_ms(self) -> float:
        """The teacher (the engine's ``bert`` design of it) exported to the section's ONNX
        runtime and timed as a candidate is (the smallest latency batch), once a run."""
        if not hasattr(self, "_teacher_runtime_ms"):
            from nas.onnx_latency import measure_onnx_latency

            runtime = self.cfg.latency_settings.runtime
            batch = self.latency_batches[min(self.latency_batches)]
            timed = measure_onnx_latency(self.task_teacher()[1], batch, runtime,
                                         repeats=self.cfg.latency_repeats)
            self.run.log("teacher_latency", **timed.to_dict())
            self._teacher_runtime_ms = timed.median_ms
        return float(self._teacher_runtime_ms)

    def study_latency_fn(self) -> Any:
        """The study's ``latency_ms`` (objective, target): with ``latency: {source:
        predicted}``, this machine's latency model of the section's runtime for the space
        (batch 1, one thread, the run's length; calibrated once and cached when its table
        has none: :func:`nas.latency.space_predictor`); else ``None``, the candidate's
        latency as its evaluator measured it (on that runtime: :meth:`scoring_fields`)."""
        latency = self.cfg.latency_settings
        if latency.source != "predicted":
            return None
        from nas.latency import space_predictor

        def note(message: str) -> None:
            self.run.log("latency_model", note=message)

        return space_predictor(self.space, seq_len=self.max_seq_len, log=note,
                               runtime=latency.runtime)

    def scoring_fields(self, val_batches: list[Any] | None = None) -> dict[str, Any]:
        """The run's scoring fields, and the runtime a ``measured`` latency is timed on
        (``latency.runtime``; a predicted search's candidates are timed in torch, the
        cheaper record beside the objective)."""
        latency = self.cfg.latency_settings
        runtime = latency.runtime if latency.source == "measured" else "torch"
        return {**super().scoring_fields(val_batches), "latency_runtime": runtime}

    def evaluator_parts(self, wanted: set[str]) -> dict[str, Any]:
        """Parts beyond the training pieces that this context gives an evaluator asking
        for ``wanted`` (none here; compress adds the sorted teacher's supernet and, when
        asked, its blockwise table)."""
        return {}

    def _check_head(self) -> None:
        """The space's classifier answers the task's labels (a space passed as an object,
        or one whose factory takes no ``num_labels``, may not)."""
        from nas.builder import build_child
        from nas.cost import batch_for

        with torch.no_grad():  # ids within the space's vocabulary (a small teacher's too)
            out = build_child(self.space, self.space.default()).eval()(
                batch_for(self.space, 1, 8))
        found, wanted = int(out.logits.shape[-1]), self.train.num_labels
        if found != wanted:
            raise ConfigError(f"space {self.space.name!r}: its head gives {found} outputs and "
                              f"the task has {wanted} labels; build it with num_labels={wanted}")

    def init_model(self, model: Any) -> None:
        """A fresh child's (or supernet's) start: its word table from the teacher's
        principal components (``embedding_init: teacher-pca``; a student learns little of
        a 30k-word table from a small task set), else as built."""
        if self.cfg.embedding_init == "teacher-pca":
            if not hasattr(self, "_embeddings"):
                from nas.distill.init import TeacherEmbeddings

                self._embeddings = TeacherEmbeddings(self.teacher.model_dir)
            self._embeddings(model)

    def export_info(self) -> dict[str, Any]:
        # how `nas export --run` rebuilds a trial's space: the factory's own arguments
        return {**super().export_info(), "space_kwargs": self.space_kwargs}

    def distillation(self, data: Any, settings: Distillation, stage: str) -> dict[str, Any]:
        """The training parts of an evaluator over ``data``: seeded batches, steps per
        epoch and the KD loss against the teacher's logits on ``data`` (``loss`` on the
        model, ``logits_loss`` on logits an evaluator computed itself)."""
        logits = self.teacher_logits(data)

        def logits_loss(out: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
            return kd_loss(out, table_rows(logits, batch["index"], out), batch["labels"],
                           settings.temperature, settings.alpha)

        def loss(model: Any, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
            return logits_loss(model(batch).logits, batch)

        return {"train_batches": self.train_batches(data, settings.batch_size, stage),
                "steps_per_epoch": math.ceil(len(data) / settings.batch_size), "loss": loss,
                "logits_loss": logits_loss}

    def evaluator(self, name: str, settings: Mapping[str, Any], *, data: Any,
                  val_batches: list[Any] | None, test: bool, workdir: Path, seed: int,
                  stage: str) -> Any:
        """The registered evaluator ``name`` built with the parts it asks for; one this
        recipe cannot give (a warm-up supernet, a teacher fit layer...) is refused in
        one line."""
        from evaluators.base import EVALUATORS

        check_evaluator(name, self.space.name, self.cfg.provided_parts)
        required, optional = EVALUATORS.get(name).parts()
        given, train = evaluator_settings(name, settings, self.cfg.retrain)
        wanted = {*required, *optional}
        pool: dict[str, Any] = {
            "space": self.space, "seed": seed, "workdir": workdir, "init": self.init_model,
            **(self.distillation(data, train, stage) if wanted & {"loss", "logits_loss"}
               else {}),
            **self.evaluator_parts(wanted)}
        return self.build_evaluator(name, given, pool, val_batches=val_batches, test=test)


__all__ = ["SearchContext"]
