"""Atomic file writes and the one checkpoint format: a nested state in a ``.safetensors`` file.

Every file the engine rewrites (results, snapshots, checkpoints) goes through
:func:`atomic_target`: the bytes land in a temporary file beside the target, are flushed
to disk, then renamed over it, so a reader (or a run killed mid-write) sees either the
old file or the whole new one.

A checkpoint is whatever nested state a training loop needs (state dicts of model,
optimizer and scheduler, RNG states, counters), stored without pickle: every tensor
is a safetensors entry named by its path in the state (``model/encoder.weight``,
``optimizer/state/0/exp_avg``), everything else is JSON in the file's metadata. JSON
keeps Python floats exactly (``repr`` round-trips) and integers of any size (numpy's
generator states); what JSON lacks is tagged as a one-key object:

* ``{"__tensor__": key}``: the tensor stored under ``key``;
* ``{"__ndarray__": {...}}``: a numpy array (its bytes as a uint8 tensor, dtype, shape);
* ``{"__tuple__": [...]}``: a tuple (``random.getstate()``, Adam's ``betas``);
* ``{"__dict__": [[k, v], ...]}``: a dict with non-string keys (optimizer state ids);
* ``{"__float__": "nan"}``: ``nan``, ``inf`` or ``-inf``.

Loading never executes anything from the file: the header is parsed as JSON and
checked (size, format, version) before a tensor is read, and a pickle, a truncated file
or a file of another format raises :class:`CheckpointError`. Importing this module does
not import torch: the atomic writers serve torch-free paths such as a cache hit.

Every safetensors file the engine writes goes through :func:`save_safetensors` (or, for a
file a library wrote, :func:`canonical_safetensors`): the safetensors library writes the
header's ``__metadata__`` in the order of a Rust hash map, which changes from process to
process, so two identical runs wrote weight files with different bytes. The header is
rewritten with sorted keys (same content, same length), which makes the file a function
of its tensors and metadata alone and its SHA-256 a check of reproduction.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.errors import NasError

if TYPE_CHECKING:
    import torch

FORMAT = "nas-state"
VERSION = 1
_META_STATE = "nas_state"
_TAGS = ("__tensor__", "__ndarray__", "__tuple__", "__dict__", "__float__")
_MAX_HEADER = 100_000_000  # safetensors' own limit on the JSON header
_counter = itertools.count()


class CheckpointError(NasError):
    """A checkpoint file cannot be read (truncated, corrupt, another format or version)."""


# ---------------------------------------------------------------------------- atomic writes


@contextmanager
def atomic_target(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success move it over ``path`` atomically.

    The temporary name is unique per process and call (several processes may write the
    same file); it is removed if the body fails.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{next(_counter)}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())  # the data is on disk before the rename makes it visible
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_target(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | os.PathLike[str], obj: Any,
                      default: Callable[[Any], Any] | None = None) -> None:
    """``obj`` as indented JSON with sorted keys (``default`` as in :func:`json.dumps`)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=default) + "\n")


# ---------------------------------------------------------------------------- safetensors


def canonical_header(data: bytes) -> bytes:
    """``data`` (a whole safetensors file) with its JSON header's keys sorted at every
    level, padded with spaces to a multiple of 8 bytes as safetensors pads it. The tensor
    offsets are relative to the end of the header, so the data bytes are kept as they are.
    """
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(len(data) - 8, _MAX_HEADER):
        raise ValueError("no safetensors header")
    header = json.loads(data[8:8 + n])
    text = json.dumps(header, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[8 + n:]


def save_safetensors(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike[str],
                     metadata: Mapping[str, str] | None = None) -> None:
    """``tensors`` (CPU, contiguous) as a safetensors file with a canonical header
    (:func:`canonical_header`), written atomically."""
    from safetensors.torch import save

    data = save(dict(tensors), metadata=dict(metadata) if metadata is not None else None)
    atomic_write_bytes(path, canonical_header(data))


def canonical_safetensors(path: str | os.PathLike[str]) -> None:
    """Rewrite a safetensors file another library wrote (``save_pretrained``) with a
    canonical header, atomically; a file already canonical is left untouched."""
    data = Path(path).read_bytes()
    fixed = canonical_header(data)
    if fixed != data:
        atomic_write_bytes(path, fixed)


# ---------------------------------------------------------------------------- save


def save_state(path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
    """Write a nested ``state`` as one ``.safetensors`` file (atomically).

    ``state`` may nest dicts, lists and tuples of tensors, numpy arrays, numbers,
    strings, bools and ``None``. Tensors are saved from the CPU, contiguous and unshared.
    """
    import numpy as np
    import torch

    tensors: dict[str, torch.Tensor] = {}
    seen_storage: set[int] = set()

    def add_tensor(where: str, t: torch.Tensor) -> str:
        t = t.detach()
        if t.layout != torch.strided:
            raise TypeError(f"checkpoint: {where} is a {t.layout} tensor; only dense tensors")
        ptr = t.untyped_storage().data_ptr() if t.device.type == "cpu" else None
        if ptr is None or not t.is_contiguous() or (ptr in seen_storage and t.numel()):
            # a copy: another device, a strided view, or storage another entry shares
            # (safetensors refuses shared storage; tied weights are saved twice)
            t = t.to("cpu", copy=True, memory_format=torch.contiguous_format)
        else:
            seen_storage.add(ptr)
        key, n = where, 1
        while key in tensors:  # {0: …} and {"0": …} at one level share a path
            key, n = f"{where}~{n}", n + 1
        tensors[key] = t
        return key

    def encode(value: Any, where: str) -> Any:
        """``value`` as JSON; ``where`` is its path in the state (the name of its tensors)."""
        if value is None or isinstance(value, bool | str | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if isinstance(value, torch.Tensor):
            return {"__tensor__": add_tensor(where, value)}
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise TypeError(f"checkpoint: {where} is a numpy array of Python objects")
            raw = torch.frombuffer(bytearray(np.ascontiguousarray(value).tobytes()),
                                   dtype=torch.uint8)
            return {"__ndarray__": {"tensor": add_tensor(where, raw), "dtype": value.dtype.str,
                                    "shape": list(value.shape)}}
        if isinstance(value, np.generic):
            return encode(value.item(), where)
        if isinstance(value, tuple):
            return {"__tuple__": [encode(v, _join(where, i)) for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [encode(v, _join(where, i)) for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            plain = all(isinstance(k, str) for k in value) and not (
                len(value) == 1 and next(iter(value)) in _TAGS)
            if plain:
                return {k: encode(v, _join(where, k)) for k, v in value.items()}
            return {"__dict__": [[encode(k, _join(where, "key")), encode(v, _join(where, k))]
                                 for k, v in value.items()]}
        raise TypeError(f"checkpoint: {where} is a {type(value).__name__}, which a checkpoint "
                        "cannot hold (tensors, arrays, numbers, strings, lists, dicts)")

    tree = encode(dict(state), "")
    metadata = {"format": FORMAT, "version": str(VERSION),
                _META_STATE: json.dumps(tree, allow_nan=False)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_safetensors(tensors, path, metadata)


def _join(where: str, key: object) -> str:
    return f"{where}/{key}" if where else str(key)


# ---------------------------------------------------------------------------- load


def _refuse(path: Path, why: str) -> CheckpointError:
    return CheckpointError(f"{path}: not a readable checkpoint ({why}); delete it, or start "
                           "again without --resume")


def _read_metadata(path: Path) -> dict[str, str]:
    """The safetensors header's metadata, after checking the header against the file size.

    Only JSON is parsed here: a pickle (``torch.save``) or any other format fails the
    size checks before anything else happens.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise _refuse(path, f"{size} bytes, too short")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, _MAX_HEADER):
            raise _refuse(path, "no safetensors header: another format (an old pickle "
                                "checkpoint?) or a truncated file")
        try:
            header = json.loads(f.read(n))
            ends = [int(v["data_offsets"][1]) for k, v in header.items()
                    if k != "__metadata__"]
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            raise _refuse(path, "broken safetensors header") from None
    if 8 + n + max(ends, default=0) != size:
        raise _refuse(path, f"{size} bytes where the header announces "
                            f"{8 + n + max(ends, default=0)}: truncated or padded")
    meta = header.get("__metadata__") or {}
    if meta.get("format") != FORMAT or _META_STATE not in meta:
        raise _refuse(path, "a safetensors file without a training state (a weights file?)")
    if meta.get("version") != str(VERSION):
        raise _refuse(path, f"format version {meta.get('version')}, this engine reads "
                            f"version {VERSION}")
    return meta


def load_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a state written by :func:`save_state` (tensors on the CPU)."""
    import numpy as np
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        meta = _read_metadata(path)
        tree = json.loads(meta[_META_STATE])
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not a dict)
    except (OSError, ValueError, SafetensorError) as err:
        if isinstance(err, CheckpointError):
            raise
        raise _refuse(path, str(err).splitlines()[0] if str(err) else type(err).__name__) \
            from None

    def decode(value: Any) -> Any:
        if isinstance(value, list):
            return [decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((tag, inner),) = value.items()
            if tag == "__tensor__":
                return tensors[inner]
            if tag == "__ndarray__":
                raw = tensors[inner["tensor"]].numpy().tobytes()
                return np.frombuffer(raw, dtype=np.dtype(inner["dtype"])).reshape(
                    inner["shape"]).copy()
            if tag == "__tuple__":
                return tuple(decode(v) for v in inner)
            if tag == "__dict__":
                return {decode(k): decode(v) for k, v in inner}
            if tag == "__float__":
                return float(inner)
        return {k: decode(v) for k, v in value.items()}

    try:
        return decode(tree)
    except (KeyError, TypeError, ValueError) as err:
        raise _refuse(path, f"inconsistent state ({err})") from None


__all__ = ["CheckpointError", "atomic_target", "atomic_write_bytes", "atomic_write_json",
           "atomic_write_text", "canonical_header", "canonical_safetensors", "load_state",
           "save_safetensors", "save_state"]
