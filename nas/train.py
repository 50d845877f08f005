"""The one training loop: optimiser, schedule, clipping, accumulation, checkpoints, DDP.

Every method trains weights the same way (teacher fine-tuning, AdaBERT's search and
retrain, distillation stages): :class:`TrainSettings` holds the hyperparameters every
recipe config embeds, and :class:`Trainer` runs them. What differs between methods
enters through arguments: the batch source, the loss, hooks around each step (an
architecture step before each weight step), and extra objects whose state travels in
the checkpoint (architecture parameters and their optimiser, a sampling generator).

Resume is exact: a checkpoint (written every ``checkpoint_every`` optimiser steps and
at each epoch end, in the pickle-free format of :mod:`nas.checkpoint`) holds the model,
optimiser, scheduler, every rank's global torch RNG (dropout), the extras, the position
in the data order (epoch, batch), the running loss sums and the elapsed seconds, so an
interrupted run continues with the very same numbers as an unbroken one.

Under ``torchrun`` (``torch.distributed`` initialised) the same loop runs data-parallel:
the model is wrapped in ``DistributedDataParallel``, each rank trains on its slice of
every global batch, losses are averaged over ranks and rank 0 writes the checkpoints.

The loop runs on the run's device (:mod:`nas.device`): it puts its model there (with
whatever a recipe wrapped around a built network: fit maps, MLM heads; in place, so
optimisers made earlier keep their parameters) and moves each batch there. ``precision``
bf16 or fp16 runs the forward pass and loss under ``torch.autocast`` (fp16 with a
``GradScaler``, whose state travels in the checkpoint); fp32 adds nothing, so CPU
results stay bit for bit the same.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import distributed as dist
from torch import nn

from nas.checkpoint import CheckpointError, load_state, save_state
from nas.device import (
    autocast,
    current_device,
    current_precision,
    grad_scaler,
    map_tensors,
    module_device,
    place,
)
from nas.errors import NasError

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

log = logging.getLogger("nas.train")

OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("cosine", "linear", "constant")


class NonFiniteLossError(NasError):
    """The training loss became NaN or infinite."""


@dataclass
class TrainSettings:
    """Hyperparameters of a training loop, shared by every recipe's configuration.

    ``batch_size`` is the global batch the batch source yields (split over the ranks
    under DDP); ``grad_accum`` batches make one optimiser step. ``epochs`` passes over the
    data, cut short after ``max_steps`` optimiser steps when given. Weight decay skips
    biases and normalisation weights (parameters with fewer than 2 dimensions). The
    schedule warms up linearly over ``warmup_fraction`` of the steps, then goes from
    ``lr`` to ``lr_min`` (cosine or linear) or stays at ``lr`` (constant).
    ``momentum`` is SGD's. ``grad_clip`` is the max global gradient norm (None = off).
    """

    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 32
    lr: float = 1e-3
    optimizer: str = "adamw"
    momentum: float = 0.9
    weight_decay: float = 0.01
    schedule: str = "cosine"
    warmup_fraction: float = 0.0
    lr_min: float = 0.0
    grad_clip: float | None = None
    grad_accum: int = 1
    checkpoint_every: int = 200

    def __post_init__(self) -> None:
        checks = [
            ("epochs", self.epochs >= 1, "an integer >= 1"),
            ("max_steps", self.max_steps is None or self.max_steps >= 1, "None or >= 1"),
            ("batch_size", self.batch_size >= 1, "an integer >= 1"),
            ("lr", 0.0 < self.lr < math.inf, "a number > 0"),
            ("optimizer", self.optimizer in OPTIMIZERS, " or ".join(OPTIMIZERS)),
            ("momentum", 0.0 <= self.momentum < 1.0, "in [0, 1)"),
            ("weight_decay", 0.0 <= self.weight_decay < math.inf, "a number >= 0"),
            ("schedule", self.schedule in SCHEDULES, " or ".join(SCHEDULES)),
            ("warmup_fraction", 0.0 <= self.warmup_fraction < 1.0, "in [0, 1)"),
            ("lr_min", 0.0 <= self.lr_min <= self.lr, f"in [0, lr={self.lr}]"),
            ("grad_clip", self.grad_clip is None or 0.0 < self.grad_clip < math.inf,
             "None (off) or a number > 0"),
            ("grad_accum", self.grad_accum >= 1, "an integer >= 1"),
            ("checkpoint_every", self.checkpoint_every >= 1, "an integer >= 1 (steps)"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")


def loop_settings(settings: TrainSettings) -> TrainSettings:
    """The shared loop's own settings out of a stage's settings, which subclass
    :class:`TrainSettings` with keys of their own (corpus, ``distill`` switches...)."""
    from dataclasses import asdict

    names = TrainSettings.__dataclass_fields__
    return TrainSettings(**{k: v for k, v in asdict(settings).items() if k in names})


def lr_factor(settings: TrainSettings, step: int, total: int) -> float:
    """The learning-rate multiplier after ``step`` of ``total`` optimiser steps.

    Linear warm-up from 0, then ``lr`` → ``lr_min``; the linear case is the formula of
    ``transformers.get_linear_schedule_with_warmup`` (bit for bit when ``lr_min`` is 0).
    """
    warmup = int(settings.warmup_fraction * total)
    if step < warmup:
        return float(step) / float(max(1, warmup))
    if settings.schedule == "constant":
        return 1.0
    floor = settings.lr_min / settings.lr
    if settings.schedule == "linear":
        remaining = float(total - step) / float(max(1, total - warmup))
        return floor + (1.0 - floor) * max(0.0, remaining)
    done = min(1.0, float(step - warmup) / float(max(1, total - warmup)))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * done))


def default_param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay on weight matrices and embeddings; none on biases and norm weights (< 2 dims)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if weight_decay == 0.0:
        return [{"params": params}]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def make_optimizer(settings: TrainSettings,
                   param_groups: Iterable[dict[str, Any]]) -> torch.optim.Optimizer:
    groups = list(param_groups)
    if settings.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=settings.lr, momentum=settings.momentum,
                               weight_decay=settings.weight_decay)
    return torch.optim.AdamW(groups, lr=settings.lr, weight_decay=settings.weight_decay)


class Stateful(Protocol):
    def state_dict(self) -> Mapping[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> Any: ...


class GeneratorState:
    """A ``torch.Generator`` as a :class:`Trainer` extra: its state travels in checkpoints."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.set_state(state["state"])


@dataclass
class TrainResult:
    """``steps``: optimiser steps done; ``history``: one row per epoch (``epoch``, ``step``,
    mean of each logged value, and what ``on_epoch_end`` returned); ``seconds``: time in
    training steps, across resumes (``on_epoch_end`` excluded)."""

    steps: int
    history: list[dict[str, Any]] = field(default_factory=list)  # "val": a dict of metrics
    seconds: float = 0.0


#: ``loss(model, batch)``: ``model`` is the trainer's own (any class: a loss may name it)
LossFn = Callable[[Any, Any], "torch.Tensor | tuple[torch.Tensor, Mapping[str, float]]"]
BatchSource = Callable[[int, int], Iterable[Any]]


class Trainer:
    """Train ``model`` with ``settings`` on ``batches``; see :meth:`fit` for the call order.

    * ``batches(epoch, start_batch)`` yields the batches of ``epoch`` from index
      ``start_batch`` on, ``steps_per_epoch`` of them in all, in an order that depends on
      ``epoch`` only (seed it with ``seed + epoch``): this is what makes resume exact.
      A batch is a tensor, or a dict/list/tuple nesting tensors (dim 0 = examples).
    * ``loss_fn(model, batch)`` returns the mean loss over the batch, or ``(loss, info)``
      with ``info`` a dict of floats to log. ``model`` is what to call for the forward
      pass: the DDP wrapper under ``torchrun``; reach submodules through ``trainer.model``.
    * ``checkpoint``: the ``.safetensors`` file to write and, if it exists, resume from.
    * ``seed``: seeds the global torch RNG (dropout) with ``seed + rank`` at the start of a
      fresh run; ``None`` leaves it as the caller set it.
    * ``optimizer`` replaces the one made from ``settings`` (the schedule still applies to
      it); ``param_groups`` replaces :func:`default_param_groups`.
    * ``before_step(step, batch)``: before each batch's forward (``step`` = optimiser steps
      done); gets the whole global batch; may return a dict of floats to log.
    * ``after_step(step, info)``: after each optimiser step (``step`` counts it), with the
      logged values averaged over its batches and ranks, plus ``lr``.
    * ``on_epoch_end(epoch, means)``: after the last step of each epoch (0-based index;
      also a final partial epoch cut by ``max_steps``), before its checkpoint; may return
      a dict of values (dev metrics) added to that epoch's history row.
    * ``stateful``: name → object with ``state_dict()``/``load_state_dict()``, saved in and
      restored from the checkpoint.

    * ``device``: where to train (default: the run's, :func:`nas.device.current_device`;
      outside a run, where ``model`` is); ``model`` is moved there (extras and frozen
      models the hooks call are the caller's to place). ``precision``: ``fp32``, ``bf16``
      or ``fp16``
      (default: the run's, :func:`nas.device.current_precision`); ``before_step`` hooks
      (an architecture step) run outside autocast.

    Under ``torchrun`` initialise the process group first (:func:`nas.device.init_distributed`:
    gloo on CPU; on GPUs NCCL, after ``torch.cuda.set_device(local_rank)``). The
    batch source yields the same global batches on every rank; ``find_unused_parameters``
    is DDP's (needed when a step leaves parameters unused, as hard Gumbel sampling does).
    """

    def __init__(self, model: nn.Module, settings: TrainSettings, batches: BatchSource,
                 steps_per_epoch: int, loss_fn: LossFn, *,
                 checkpoint: str | Path | None = None, seed: int | None = None,
                 optimizer: torch.optim.Optimizer | None = None,
                 param_groups: Iterable[dict[str, Any]] | None = None,
                 before_step: Callable[[int, Any], Mapping[str, float] | None] | None = None,
                 after_step: Callable[[int, dict[str, float]], None] | None = None,
                 on_epoch_end: Callable[[int, dict[str, float]],
                                        Mapping[str, Any] | None] | None = None,
                 stateful: Mapping[str, Stateful] | None = None,
                 progress: bool = True, desc: str = "train",
                 find_unused_parameters: bool = False, device: torch.device | None = None,
                 precision: str | None = None) -> None:
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be >= 1, got {steps_per_epoch}")
        if optimizer is not None and param_groups is not None:
            raise ValueError("pass optimizer or param_groups, not both")
        # on the run's device before the optimiser sees its parameters; outside a run
        # (a script of one's own) the loop follows the model wherever it was put
        self.device = device if device is not None else current_device(module_device(model))
        place(model, self.device)  # in place: a no-op where it already is (the CPU runs)
        self.model = model
        self.settings = settings
        self.batches = batches
        self.steps_per_epoch = steps_per_epoch
        self.loss_fn = loss_fn
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.seed = seed
        self.before_step, self.after_step, self.on_epoch_end = before_step, after_step, \
            on_epoch_end
        self.stateful = dict(stateful or {})
        self.progress, self.desc = progress, desc
        self.find_unused_parameters = find_unused_parameters
        self.distributed = dist.is_available() and dist.is_initialized()
        self.world = dist.get_world_size() if self.distributed else 1
        self.rank = dist.get_rank() if self.distributed else 0

        updates_per_epoch = -(-steps_per_epoch // settings.grad_accum)
        self.total_steps = settings.epochs * updates_per_epoch
        if settings.max_steps is not None:
            self.total_steps = min(self.total_steps, settings.max_steps)
        self.optimizer = optimizer or make_optimizer(
            settings, param_groups if param_groups is not None
            else default_param_groups(model, settings.weight_decay))
        total = self.total_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: lr_factor(settings, step, total))

        # the position: where the next batch comes from, and what the epoch logged so far
        self.step, self.epoch, self.batch = 0, 0, 0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.history: list[dict[str, Any]] = []
        self.seconds = 0.0
        self._saved_step: int | None = None
        self._clock = 0.0
        self.precision = precision if precision is not None else current_precision()
        self._autocast = lambda: autocast(self.precision, self.device)
        self.scaler = grad_scaler(self.precision, self.device)

    # -- the loop ------------------------------------------------------------------
    def fit(self) -> TrainResult:
        """Train to ``total_steps``, resuming from the checkpoint if there is one.

        Per batch: ``before_step`` → this rank's slice → ``loss_fn`` → backward (scaled
        for accumulation). Per optimiser step: clip → optimiser and scheduler step →
        ``after_step`` → a checkpoint every ``checkpoint_every`` steps. Per epoch:
        ``on_epoch_end`` → history row → checkpoint.
        """
        if not self._resume() and self.seed is not None:
            torch.manual_seed(self.seed + self.rank)
        net = self._wrap()
        s, k = self.settings, self.settings.grad_accum
        from tqdm.auto import tqdm

        bar = tqdm(total=self.total_steps, initial=self.step, desc=self.desc, unit="step",
                   disable=not self.progress or self.rank != 0)
        self._clock = time.perf_counter()
        with bar:
            for epoch in range(self.epoch, s.epochs):
                if self.step >= self.total_steps:
                    break
                start = self.batch if epoch == self.epoch else 0
                index, group = start, []  # group: logged values of this step's batches
                for batch in self.batches(epoch, start):
                    self.model.train()  # hooks may have switched to eval
                    group_start = index - index % k
                    group_size = min(k, self.steps_per_epoch - group_start)
                    # the hook (AdaBERT's architecture step) reads the batch's labels too:
                    # it gets the batch on the model's device, as the loss does
                    extra = (self.before_step(self.step, self._on_device(batch))
                             if self.before_step else None)
                    last = index + 1 == group_start + group_size
                    sync = (nullcontext() if last or self.world == 1  # else _wrap made a DDP
                            else cast("DistributedDataParallel", net).no_sync())
                    with sync:
                        group.append(self._forward_backward(net, batch, extra or {},
                                                            group_size, epoch, index))
                    index += 1
                    if not last:
                        continue
                    self._optimizer_step(group, bar)
                    group = []
                    if index == self.steps_per_epoch or self.step >= self.total_steps:
                        break
                    if self.step % s.checkpoint_every == 0:
                        self._save(epoch, index)
                if group or (index < self.steps_per_epoch and self.step < self.total_steps):
                    raise ValueError(f"the batch source gave {index - start} batches for epoch "
                                     f"{epoch} from batch {start}; steps_per_epoch says "
                                     f"{self.steps_per_epoch}")
                self._end_epoch(epoch, index)
        return TrainResult(steps=self.step, history=list(self.history), seconds=self.seconds)

    def _forward_backward(self, net: nn.Module, batch: Any, extra: Mapping[str, Any],
                          group_size: int, epoch: int, index: int) -> dict[str, float]:
        """Loss and backward pass of one batch; returns its logged values (rank average)."""
        local, n_local, n_global = self._local_batch(batch)
        with self._autocast():
            out = self.loss_fn(net, local)
        loss, info = out if isinstance(out, tuple) else (out, {})
        values = self._reduce({"loss": loss.detach(), **info, **extra}, n_local)
        if not math.isfinite(values["loss"]):
            where = (f"the last good checkpoint is {self.checkpoint} (step {self._saved_step})"
                     if self._saved_step is not None else "no checkpoint was written yet")
            raise NonFiniteLossError(
                f"loss is {values['loss']} at step {self.step + 1} (epoch {epoch + 1}, batch "
                f"{index + 1}); {where}; lower the learning rate or check the data")
        # DDP averages gradients over ranks: weight each rank by its share of the batch, and
        # each accumulated batch by 1/group_size, to get the gradient of the whole-batch mean.
        share = n_local * self.world / n_global if self.world > 1 else 1.0
        scale = share / group_size
        loss = loss * scale if scale != 1.0 else loss
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return values

    def _optimizer_step(self, group: list[dict[str, float]], bar: Any) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not scaled ones
        if self.settings.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.grad_clip)
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped when a gradient overflowed
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        keys = dict.fromkeys(key for values in group for key in values)
        info = {key: sum(v[key] for v in group if key in v) / sum(key in v for v in group)
                for key in keys}
        for key, value in info.items():
            if not math.isnan(value):  # e.g. an architecture loss while α is frozen
                self.sums[key] = self.sums.get(key, 0.0) + value
                self.counts[key] = self.counts.get(key, 0) + 1
        if self.after_step is not None:
            self.after_step(self.step, {**info, "lr": lr})
        bar.update(1)
        bar.set_postfix(loss=f"{info['loss']:.4f}")

    def _end_epoch(self, epoch: int, index: int) -> None:
        means = {key: self.sums[key] / self.counts[key] for key in self.sums}
        row: dict[str, Any] = {"epoch": epoch + 1, "step": self.step, **means}
        self._tick()
        if self.on_epoch_end is not None:
            row.update(self.on_epoch_end(epoch, means) or {})
        self._clock = time.perf_counter()  # the hook's time (evaluation) is not training
        self.history.append(row)
        self.sums, self.counts = {}, {}
        if index == self.steps_per_epoch:
            self._save(epoch + 1, 0)
        else:  # stopped by max_steps inside the epoch
            self._save(epoch, index)

    # -- data parallelism --------------------------------------------------------
    def _wrap(self) -> nn.Module:
        if not self.distributed:
            return self.model
        from torch.nn.parallel import DistributedDataParallel

        cuda = self.device.type == "cuda"
        return DistributedDataParallel(
            self.model, device_ids=[self.device.index] if cuda else None,
            find_unused_parameters=self.find_unused_parameters)

    def _on_device(self, batch: Any) -> Any:
        """``batch`` with every tensor on the model's device (a no-op on the CPU)."""
        return map_tensors(batch, lambda t: t.to(self.device))

    def _local_batch(self, batch: Any) -> tuple[Any, int, int]:
        """This rank's slice of ``batch`` on the model's device, its size and the batch's.

        Rank r takes rows [start, end) as in ``torch.tensor_split``; a rank left without
        rows (a tiny last batch) runs one row with weight 0, since every rank must run
        the backward pass.
        """
        device, n = self.device, _batch_size(batch)
        if self.world == 1:
            return self._on_device(batch), n, n
        base, extra = divmod(n, self.world)
        start = self.rank * base + min(self.rank, extra)
        end = start + base + (self.rank < extra)
        rows = slice(start, end) if end > start else slice(0, 1)

        def take(t: torch.Tensor) -> torch.Tensor:
            if t.ndim == 0 or t.shape[0] != n:
                raise ValueError(f"every tensor of a batch needs {n} rows (dim 0) to be split "
                                 f"over ranks, got shape {tuple(t.shape)}")
            return t[rows].to(device)

        return map_tensors(batch, take), end - start, n

    def _reduce(self, values: Mapping[str, Any], n_local: int) -> dict[str, float]:
        """Logged values as floats, averaged over ranks weighted by their rows."""
        floats = {k: float(v) for k, v in values.items()}
        if self.world == 1:
            return floats
        t = torch.tensor([float(n_local)] + [v * n_local if n_local else 0.0
                                            for v in floats.values()],
                         dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return {k: float(t[i + 1] / t[0]) for i, k in enumerate(floats)}

    # -- checkpoints -------------------------------------------------------------
    def _tick(self) -> None:
        now = time.perf_counter()
        self.seconds += now - self._clock
        self._clock = now

    def _rng_states(self) -> list[dict[str, torch.Tensor]]:
        mine = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            mine["cuda"] = torch.cuda.get_rng_state(self.device)
        if self.world == 1:
            return [mine]
        states: list[Any] = [None] * self.world
        dist.all_gather_object(states, mine)
        return states

    def _save(self, epoch: int, batch: int) -> None:
        if self.checkpoint is None:
            return
        self._tick()
        rng = self._rng_states()  # every rank takes part in the gather
        if self.rank == 0:
            save_state(self.checkpoint, {
                "position": {"epoch": epoch, "batch": batch, "step": self.step},
                "layout": {"steps_per_epoch": self.steps_per_epoch,
                           "grad_accum": self.settings.grad_accum},
                "settings": asdict(self.settings),
                "sums": self.sums, "counts": self.counts, "history": self.history,
                "seconds": self.seconds, "rng": rng,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "stateful": {name: obj.state_dict() for name, obj in self.stateful.items()},
                **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
            })
        self._saved_step = self.step

    def _resume(self) -> bool:
        """Load the checkpoint if there is one; ``False`` for a fresh run."""
        path = self.checkpoint
        if path is None or not path.is_file():
            return False
        state = load_state(path)
        layout = {"steps_per_epoch": self.steps_per_epoch,
                  "grad_accum": self.settings.grad_accum}
        if state.get("layout") != layout:
            raise CheckpointError(f"{path}: written for {state.get('layout')}, this run has "
                                  f"{layout}; delete it, or start again without --resume")
        missing = sorted(set(self.stateful) - set(state["stateful"]))
        if missing:
            raise CheckpointError(f"{path}: lacks the state of {missing[0]!r} (a checkpoint of "
                                  "another stage?); delete it, or start again without --resume")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        for name, obj in self.stateful.items():
            obj.load_state_dict(state["stateful"][name])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        rng = state["rng"]
        if len(rng) != self.world:
            log.warning("%s was written by %d processes, this run has %d: dropout will not "
                        "repeat the interrupted run exactly", path, len(rng), self.world)
        mine = rng[self.rank % len(rng)]
        torch.set_rng_state(mine["torch"])
        if "cuda" in mine and self.device.type == "cuda":
            torch.cuda.set_rng_state(mine["cuda"], self.device)
        pos = state["position"]
        self.epoch, self.batch, self.step = pos["epoch"], pos["batch"], pos["step"]
        self.sums, self.counts = state["sums"], state["counts"]
        self.history, self.seconds = state["history"], state["seconds"]
        self._saved_step = self.step
        log.info("resumed from %s at step %d/%d (epoch %d, batch %d)", path, self.step,
                 self.total_steps, self.epoch + 1, self.batch)
        return True


def _batch_size(batch: Any) -> int:
    """Rows of the batch's first tensor (depth first)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.ndim else 1
    items = batch.values() if isinstance(batch, Mapping) else (
        batch if isinstance(batch, list | tuple) else ())
    for item in items:
        n = _batch_size(item)
        if n:
            return n
    return 0


__all__ = ["GeneratorState", "NonFiniteLossError", "TrainResult", "TrainSettings", "Trainer",
           "loop_settings",
           "default_param_groups", "lr_factor", "make_optimizer"]
