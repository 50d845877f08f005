"""Teacher-output cache: logits and AdaBERT probe logits, memory-mapped.

A teacher forward pass costs more than a student's, and a search evaluates thousands
of students against the same teacher outputs, so they are computed once and stored on
disk as ``.npy`` files read back with ``numpy`` memory mapping (pages load on demand;
many processes share them). A cache entry is keyed by the teacher's identity
(:func:`nas.teacher.teacher_identity`), the data's fingerprint
(:attr:`nas.data.TaskData.fingerprint`) and the sequence length; a run that finds its
arrays does no teacher forward pass and never loads the teacher.

Layout under ``<cache>/outputs/<teacher_id>/<data fingerprint>-L<max_seq_len>/``::

    logits.npy                 (N, C) float32   the teacher classifier's logits
    features-<pool>.npy        (J+1, N, D) fp16  pooled per-layer features (probe input)
    probe_logits-<probes>.npy  (J+1, N, C) float32
    meta.json

The cache root and the keys' hash are :mod:`nas.cache`'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nas.cache import cache_root, hold_shared, json_key, read_record
from nas.checkpoint import atomic_target, atomic_write_json
from nas.data.tasks import TaskData
from nas.errors import NasError


def _atomic_save(path: Path, array: np.ndarray) -> None:
    """``np.save`` through a temporary file: a reader never sees a half-written array."""
    with atomic_target(path) as tmp, open(tmp, "wb") as f:  # a file object: no ".npy" added
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)


class TeacherOutputCache:
    """Cached outputs of one teacher on one :class:`~nas.data.TaskData` at one length.

    Reading (:meth:`load`, :meth:`has`) never touches the teacher. The ``compute_*``
    methods load it (through :func:`nas.teacher.load_teacher`) only for what is missing.
    """

    def __init__(
        self,
        teacher: str | None,
        data: TaskData,
        max_seq_len: int = 128,
        cache_dir: str | os.PathLike[str] | None = None,
        teacher_id: str | None = None,
        batch_size: int = 64,
    ) -> None:
        from nas.teacher import resolve_teacher, teacher_identity

        self.teacher = resolve_teacher(teacher)
        self.teacher_id = teacher_id or teacher_identity(self.teacher)
        self.data = data
        self.max_seq_len = max_seq_len
        self.batch_size = batch_size
        if not data.fingerprint:
            raise NasError(f"data {data.task}/{data.split} has no fingerprint to key a cache by")
        self.path = (
            cache_root(cache_dir) / "outputs" / self.teacher_id
            / f"{data.fingerprint}-L{max_seq_len}"
        )
        self._model: Any = None
        self._tokenizer: Any = None

    # ----------------------------------------------------------------- storage

    def file(self, name: str) -> Path:
        return self.path / f"{name}.npy"

    def has(self, name: str) -> bool:
        return self.file(name).is_file()

    def load(self, name: str) -> np.ndarray:
        """The stored array ``name``, memory-mapped read-only."""
        if not self.has(name):
            raise NasError(f"no cached array {name!r} in {self.path}")
        hold_shared(self.path.parent)  # the teacher's outputs: read to the run's end
        try:  # never unpickles: np.load refuses object arrays without allow_pickle
            return np.load(self.file(name), mmap_mode="r")
        except (ValueError, OSError, EOFError) as err:
            raise NasError(f"{self.file(name)}: a cached teacher output that does not load "
                           f"({' '.join(str(err).split())[:120]}); delete {self.path} (or "
                           "`nas cache clear outputs`) and it is computed again") from None

    def save(self, name: str, array: np.ndarray) -> np.ndarray:
        self.path.mkdir(parents=True, exist_ok=True)
        _atomic_save(self.file(name), array)
        meta_path = self.path / "meta.json"
        meta: dict[str, Any] = read_record(meta_path) if meta_path.is_file() else {
            "teacher": self.teacher, "teacher_id": self.teacher_id, "task": self.data.task,
            "split": self.data.split, "examples": len(self.data),
            "data_fingerprint": self.data.fingerprint, "max_seq_len": self.max_seq_len,
            "arrays": {},
        }
        meta["arrays"][name] = {"shape": list(array.shape), "dtype": str(array.dtype)}
        atomic_write_json(meta_path, meta)
        return self.load(name)

    # ---------------------------------------------------------- teacher passes

    def _teacher(self) -> tuple[Any, Any]:
        if self._model is None:
            from transformers import AutoConfig, AutoTokenizer

            from nas.teacher import load_teacher

            config = AutoConfig.from_pretrained(self.teacher, local_files_only=True)
            is_classifier = any("ForSequenceClassification" in a
                                for a in (config.architectures or []))
            # a fine-tuned teacher gives logits; a bare encoder gives features only
            self._model = load_teacher(
                self.teacher, num_labels=self.data.num_labels if is_classifier else None
            )
            self._tokenizer = AutoTokenizer.from_pretrained(self.teacher, local_files_only=True)
        return self._model, self._tokenizer

    def _batches(self, indices: Sequence[int]) -> Any:
        """Batches over ``indices`` sorted by length (less padding), with their positions."""
        from nas.tokenization import encode

        _, tok = self._teacher()
        idx = np.asarray(indices, dtype=np.int64)
        texts_b = self.data.texts_b
        # character length approximates token length well enough to group batches
        lengths = np.array([len(self.data.texts_a[i]) + (len(texts_b[i]) if texts_b else 0)
                            for i in idx])
        idx = idx[np.argsort(lengths, kind="stable")]
        for start in range(0, len(idx), self.batch_size):
            part = idx[start : start + self.batch_size]
            a = [self.data.texts_a[i] for i in part]
            b = [self.data.texts_b[i] for i in part] if self.data.texts_b is not None else None
            yield part, encode(tok, a, b, max_length=self.max_seq_len, separate_b=False)

    def compute_logits_and_features(self, pooling: str = "mean", progress: bool = False) -> None:
        """One forward pass over the data: classifier logits (if the teacher has a head) and
        pooled per-layer features for the probes (docs/reference.md#adabert)."""
        import torch
        from tqdm.auto import tqdm

        from nas.device import module_device, to_device
        from nas.distill.probes import pool_hidden_states

        model, _ = self._teacher()  # on the run's device (nas.teacher.load_teacher)
        n = len(self.data)
        features: np.ndarray | None = None
        logits: np.ndarray | None = None
        total = (n + self.batch_size - 1) // self.batch_size
        with torch.inference_mode():
            for part, batch in tqdm(self._batches(range(n)), total=total,
                                    desc="teacher forward", disable=not progress):
                batch = to_device(batch, module_device(model))
                out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            token_type_ids=batch["token_type_ids"], output_hidden_states=True)
                pooled = pool_hidden_states(out.hidden_states, batch["attention_mask"], pooling)
                if features is None:
                    features = np.zeros((pooled.shape[0], n, pooled.shape[2]), dtype=np.float16)
                features[:, part] = pooled.cpu().numpy().astype(np.float16)
                if hasattr(out, "logits"):
                    if logits is None:
                        logits = np.zeros((n, out.logits.shape[-1]), dtype=np.float32)
                    logits[part] = out.logits.float().cpu().numpy()
        assert features is not None  # noqa: S101 (a task has rows: the readers refuse empty files)
        self.save(f"features-{pooling}", features)
        if logits is not None:
            self.save("logits", logits)

    def logits(self, progress: bool = False) -> np.ndarray:
        """Teacher classifier logits (N, C), computed once."""
        if not self.has("logits"):
            self.compute_logits_and_features(progress=progress)
        if not self.has("logits"):
            raise NasError(f"teacher {self.teacher} has no classification head: fine-tune it "
                           f"first (nas teacher finetune)")
        return self.load("logits")

    def features(self, pooling: str = "mean", progress: bool = False) -> np.ndarray:
        """Pooled per-layer features (J+1, N, D), fp16, computed once."""
        name = f"features-{pooling}"
        if not self.has(name):
            self.compute_logits_and_features(pooling, progress=progress)
        return self.load(name)

    def probe_logits(self, probes: Any, probes_id: str, pooling: str = "mean",
                     progress: bool = False) -> np.ndarray:
        """Probe logits (J+1, N, C) of a :class:`~nas.distill.probes.ProbeSet`, cached
        under ``probes_id``."""
        name = f"probe_logits-{probes_id}"
        if not self.has(name):
            self.save(name, probes.logits(self.features(pooling, progress=progress)))
        return self.load(name)


def cached_probe_logits(
    teacher: str | None,
    train: TaskData,
    data: TaskData | None = None,
    max_seq_len: int = 128,
    pooling: str = "mean",
    cache_dir: str | os.PathLike[str] | None = None,
    l2: float = 1e-3,
    progress: bool = False,
) -> np.ndarray:
    """AdaBERT probe logits (J+1, N, C) of ``data`` (default: ``train``), cached
    (docs/reference.md#adabert).

    The probes are trained once on the frozen teacher's pooled ``train`` features and
    saved beside them; their logits on ``data`` are stored memory-mapped. When all of that
    is on disk this reads it back without loading the teacher.
    """
    from nas.distill.probes import train_probes

    data = data or train
    out = TeacherOutputCache(teacher, data, max_seq_len, cache_dir)
    probes_id = json_key([train.fingerprint, pooling, l2], 12)
    if out.has(f"probe_logits-{probes_id}"):
        return out.load(f"probe_logits-{probes_id}")
    train_cache = out if data is train else TeacherOutputCache(
        teacher, train, max_seq_len, cache_dir, teacher_id=out.teacher_id)
    probe_file = train_cache.path / f"probes-{probes_id}.safetensors"
    from nas.distill.probes import ProbeSet

    if probe_file.is_file():
        probes = ProbeSet.load(probe_file)
    else:
        feats = train_cache.features(pooling, progress=progress)
        probes = train_probes(feats, np.asarray(train.labels), train.num_labels, l2=l2)
        train_cache.path.mkdir(parents=True, exist_ok=True)
        probes.save(probe_file)
    return out.probe_logits(probes, probes_id, pooling, progress=progress)
