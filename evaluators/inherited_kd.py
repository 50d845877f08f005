"""Inherited weights plus a short distillation (``inherited-kd``): a candidate starts from
its slice of the (importance-sorted) teacher and is distilled briefly from the full
teacher before it is scored (docs/reference.md#teacher-compression).

Minitron (Muralidharan et al. 2024, §2-3) and DynaBERT (Hou et al. 2020, §3) both score
or finish a pruned sub-network after a short distillation from the full model rather than
from scratch: the slice of a sorted teacher keeps its most important heads, neurons and
channels (:mod:`nas.compress.importance`), so a few hundred steps recover most of what the
cut lost. Here:

* **start**: :func:`nas.builder.extract_child` of the supernet filled from the sorted
  teacher, as the inherited-weights scorer (:mod:`evaluators.inherited`) cuts it; that
  inherited score, before any training, is reported to the trial as step 0 (a pruner may
  stop a hopeless candidate there, before it costs a step);
* **distillation**: the recipe's logits loss (``logits_loss``: Hinton et al. 2015, T = 2
  in the compress files) plus ``hidden_weight`` times a hidden-state MSE. The hidden
  states are the outputs of the layers the candidate keeps, matched to a layer of the
  full teacher (the supernet's default child: for ``bert-subnet`` the whole sorted
  teacher) by ``layer_mapping`` (:func:`layer_pairs`; by default *by graph node*, the
  layer each was sliced from), or of a teacher assistant (``assistant``: on the layers
  and channels it has), and compared **through the slice**: the teacher's state is
  cut to the candidate's leading ``hidden_size`` channels, the very channels the
  candidate inherited (where the widths match this is the whole state). The squared
  error is averaged over the unpadded tokens and channels, then over the kept layers
  (Minitron §3's hidden-state loss on the depth the student keeps; the LayerNorm outputs
  are on one scale, so no per-layer normalisation);
* **budget**: the settings' loop (:class:`InheritedKDSettings`, ``max_steps`` caps it),
  validated after each epoch; :class:`~evaluators.training.TrainingEvaluator` does the
  rest (trial reports and pruning, report-split metrics, weights, measured costs).

The same evaluator with the run's full training budget is the compress method's final
retrain "from the inherited weights" (docs/compress.md#steps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluators.base import EVALUATORS, FullTrainingData, Objective, Trial
from evaluators.training import Trained, TrainingEvaluator
from nas.architecture import Architecture

if TYPE_CHECKING:  # listing evaluators must not import torch
    from nas.space import SearchSpace

Batch = Mapping[str, Any]
#: The graph records the hidden-state loss reads (``record="hidden_states"`` nodes).
HIDDEN = "hidden_states"
#: ``score: teacher-kl`` (:class:`~evaluators.settings.InheritedKDSettings`)
TEACHER_KL = "teacher-kl"


@dataclass(kw_only=True)
class InheritedKDTask(FullTrainingData):
    """What the recipe provides (with :class:`FullTrainingData`'s validation, report and
    latency batches).

    supernet: the space's supernet holding the sorted teacher's weights
        (:func:`spaces.bert_subnet.from_design`); its default child is the teacher the
        hidden states are matched against.
    train_batches(epoch, start_batch): the epoch's training batches (each with ``index``
        when ``logits_loss`` reads precomputed teacher logits).
    steps_per_epoch: batches per epoch.
    logits_loss(logits, batch): the distillation loss on the candidate's logits (the
        recipe's KD against the teacher's logits, or a teacher assistant's).
    assistant: a teacher assistant (a retrained point of the same supernet, frozen) whose
        hidden states replace the full teacher's, on the layers and channels it has
        (Mirzadeh et al. 2020); ``None``: the full teacher.
    """

    supernet: Any
    train_batches: Callable[[int, int], Iterable[Batch]]
    steps_per_epoch: int
    logits_loss: Callable[[Any, Batch], Any]
    assistant: Any = None


def recorded_nodes(graph: Any, kind: str = HIDDEN) -> list[str]:
    """The nodes of ``graph`` that record ``kind``, in the order a forward pass records
    them (they lie on one chain, the encoder's layers, so any topological order gives
    the same sequence)."""
    import networkx as nx

    return [n for n in nx.topological_sort(graph) if graph.nodes[n].get("record") == kind]


def layer_pairs(student: list[str], teacher: list[str], mapping: str = "sliced"
                ) -> dict[str, str]:
    """The teacher layer (recorded node) each kept student layer learns, by ``mapping``:

    * ``sliced``: the layer it was sliced from (same node name), so the first k layers
      of a truncation learn teacher layers 1..k;
    * ``uniform``: TinyBERT's g(m) = ⌊m·N/M⌋ (Jiao et al. 2020, §3.1;
      :func:`nas.distill.losses.layer_map`), spreading M kept layers over the teacher's
      N and ending on its last, whose output the inherited classifier head was trained
      on;
    * ``last``: as ``sliced``, but the last kept layer learns the teacher's last layer
      (the head's input) whichever layer it was sliced from.
    """
    from evaluators.settings import LAYER_MAPPINGS
    from nas.distill.losses import layer_map

    if mapping not in LAYER_MAPPINGS:
        raise ValueError(f"layer_mapping must be {' or '.join(LAYER_MAPPINGS)}, got {mapping!r}")
    if not student or not teacher:
        return {}
    if mapping == "uniform":
        return {s: teacher[g - 1]
                for s, g in zip(student, layer_map(len(student), len(teacher)), strict=True)}
    pairs = {s: s for s in student if s in teacher}
    if mapping == "last":
        pairs[student[-1]] = teacher[-1]
    return pairs


def hidden_state_mse(student: Mapping[str, Any], teacher: Mapping[str, Any],
                     mask: Any) -> Any:
    """Mean over the layers both record (by node name) of the squared error between the
    student's hidden state and the teacher's cut to the student's leading channels,
    averaged over the unpadded tokens (``mask`` (B, L)) and the channels."""
    import torch

    shared = [n for n in student if n in teacher]
    if not shared:  # no layer kept (embeddings straight to the head): logits alone teach
        return torch.zeros(())
    m = mask.to(next(iter(student.values())).dtype).unsqueeze(-1)  # (B, L, 1)
    losses = []
    for name in shared:
        s = student[name]
        t = teacher[name][..., :s.shape[-1]]
        losses.append(((s - t) ** 2 * m).sum() / (m.sum() * s.shape[-1]).clamp_min(1))
    return torch.stack(losses).mean()


@EVALUATORS.register("inherited-kd")
class InheritedKDEvaluator(TrainingEvaluator):
    """Each candidate inherits the supernet's slice, is distilled briefly (logits, and
    hidden states with ``hidden_weight`` > 0) and is scored on validation (module
    docstring). ``settings``: :class:`InheritedKDSettings`."""

    task_type = InheritedKDTask

    def __init__(self, space: SearchSpace, task: InheritedKDTask, settings: Any, *,
                 hidden_weight: float = 1.0, score: str = "metric",
                 layer_mapping: str = "sliced", seed: int = 0,
                 workdir: str | Path | None = None, latency_repeats: int = 10,
                 progress: bool = False) -> None:
        super().__init__(space, task, seed=seed, workdir=workdir,
                         latency_repeats=latency_repeats, progress=progress)
        self.task: InheritedKDTask = task
        self.settings, self.hidden_weight = settings, float(hidden_weight)
        self.score, self.layer_mapping = score, layer_mapping
        if score == TEACHER_KL:
            self.objectives = (Objective("val_minus_teacher_kl", "maximize"),)
        self._teacher: Any = None
        self._teacher_log_probs: list[Any] | None = None

    def val_metrics(self, model: Any) -> dict[str, float]:
        """The task's validation metrics, and with ``score: teacher-kl`` the mean
        KL(teacher || candidate) of the answers on the validation batches (at T = 1)."""
        metrics = super().val_metrics(model)
        if self.score == TEACHER_KL:
            metrics["teacher_kl"] = self.teacher_kl(model)
        return metrics

    def val_score(self, metrics: Mapping[str, float]) -> float:
        """``score: teacher-kl``: minus the KL (higher is closer to the teacher). Why: a
        few dozen distillation steps leave most sliced candidates answering the majority
        class, so their accuracies tie, while their answer distributions still differ
        in how far they are from the teacher's (docs/compress.md, the ranking audit)."""
        if self.score == TEACHER_KL:
            return -float(metrics["teacher_kl"])
        return super().val_score(metrics)

    def teacher_kl(self, model: Any) -> float:
        """Mean over the validation examples of KL(teacher || ``model``) on the class
        probabilities; the teacher's are computed once per evaluator."""
        import torch

        batches = self.task.val_batches
        if self._teacher_log_probs is None:
            teacher = self.teacher()
            with torch.no_grad():
                self._teacher_log_probs = [torch.log_softmax(teacher(b).logits.float(), -1)
                                           for b in batches]
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for batch, t_log_p in zip(batches, self._teacher_log_probs, strict=True):
                s_log_p = torch.log_softmax(model(batch).logits.float(), -1)
                total += float((t_log_p.exp() * (t_log_p - s_log_p)).sum())
                count += int(t_log_p.shape[0])
        model.train(was_training)
        return total / max(count, 1)

    @property
    def supernet(self) -> Any:
        """The supernet the candidates inherit from (the task's)."""
        return self.task.supernet

    def teacher(self) -> Any:
        """The full teacher (the supernet's default child), frozen, in eval mode; built
        once per evaluator."""
        from nas.builder import extract_child

        if self._teacher is None:
            teacher = extract_child(self.task.supernet, self.space, self.space.default())
            for p in teacher.parameters():
                p.requires_grad_(False)
            self._teacher = teacher.eval()
        return self._teacher

    def train(self, arch: Architecture, trial: Trial, folder: Path | None) -> Trained:
        import torch

        from nas.builder import extract_child
        from nas.seeding import seed_stage
        from nas.train import Trainer, loop_settings

        task = self.task
        seed_stage(self.seed, f"inherited-kd:{arch.id}")
        child = extract_child(task.supernet, self.space, arch)
        inherited = self.validate(child, trial, 0, "inheriting")
        hidden = self.hidden_weight > 0
        teacher = self.teacher() if hidden else None
        names = recorded_nodes(child.graph) if hidden else []
        t_names = recorded_nodes(teacher.graph) if teacher is not None else []
        pairs = layer_pairs(names, t_names, self.layer_mapping)
        if teacher is not None and task.assistant is not None:
            # the assistant teaches the layers it kept; the layer map is the teacher's
            teacher = task.assistant
            t_names = recorded_nodes(teacher.graph)
            pairs = {s: t for s, t in pairs.items() if t in t_names}
        record = (HIDDEN,) if hidden else ()

        def loss(model: Any, batch: Batch) -> Any:
            out = model(batch, record=record)
            kd = task.logits_loss(out.logits, batch)
            if teacher is None:  # no hidden-state term
                return kd
            with torch.no_grad():
                t_out = teacher(batch, record=record)
            t_states = dict(zip(t_names, t_out.records[HIDDEN], strict=True))
            states = dict(zip(names, out.records.get(HIDDEN, []), strict=True))
            # only the channels the teacher side has: an assistant may be narrower
            matched = {s: t_states[t] for s, t in pairs.items()
                       if t_states[t].shape[-1] >= states[s].shape[-1]}
            mse = hidden_state_mse({s: states[s] for s in matched}, matched,
                                   batch["attention_mask"])
            return kd + self.hidden_weight * mse, {"kd": kd.detach(), "hidden_mse": mse.detach()}

        checkpoint = None if folder is None else folder / "checkpoint.safetensors"
        result = Trainer(child, loop_settings(self.settings), task.train_batches,
                         task.steps_per_epoch, loss, checkpoint=checkpoint,
                         on_epoch_end=self.epoch_end(child, trial), progress=self.progress,
                         desc=f"inherited-kd {arch.id}").fit()
        return Trained(model=child, val=result.history[-1]["val"], seconds=result.seconds,
                       steps=result.steps,
                       metrics={f"inherited_val_{k}": v for k, v in inherited.items()},
                       cleanup=None if checkpoint is None
                       else lambda: checkpoint.unlink(missing_ok=True))

    @classmethod
    def settings_type(cls) -> type:
        from evaluators.settings import InheritedKDSettings

        return InheritedKDSettings

    @classmethod
    def settings_arguments(cls, settings: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (settings,), {"hidden_weight": settings.hidden_weight,
                             "score": settings.score, "layer_mapping": settings.layer_mapping}


__all__ = ["InheritedKDEvaluator", "InheritedKDTask", "hidden_state_mse",
           "layer_pairs", "recorded_nodes"]
