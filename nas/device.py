"""Where a run computes and in which precision: the one home of ``device:`` and
``precision:``.

``device``: ``auto`` (a CUDA GPU when one is available, else the CPU), ``cpu``, ``cuda``
or ``cuda:N``. Under ``torchrun`` a bare ``cuda`` (and ``auto`` on a GPU machine) means
this process's GPU, ``cuda:$LOCAL_RANK``. :func:`resolve_device` turns a setting into a
``torch.device`` and refuses, in one line, a GPU that is not there.

A run enters :func:`use_device` once (``recipes.common.Recipe.run``, ``nas evaluate``,
``nas predict``); everything below reads :func:`current_device`: the builders
(:func:`nas.builder.build_child`, :func:`~nas.builder.build_supernet`) and the teacher
loaders put what they build there (:func:`place`), the training loop
(:class:`nas.train.Trainer`) puts its model there and moves its batches there, an engine
network (:class:`nas.network.GraphNet`) takes its inputs on its own device, and scoring
brings predictions back to the CPU. Nothing else picks a device, so a model or a batch
that skips the setting fails on a GPU with a device mismatch, and does the same on the
``meta`` device in the CPU tests (``tests/test_device.py``). See ``docs/gpu.md``.

``precision``: ``fp32`` (the default, bit for bit the results recorded on a CPU), ``bf16``
or ``fp16`` mixed precision for training through ``torch.autocast`` (Micikevicius et
al., 2018, "Mixed Precision Training", §3: fp16 needs loss scaling, which
``torch.amp.GradScaler`` does; bf16 keeps fp32's exponent range and needs none). fp16 is
refused on the CPU, where autocast's fp16 kernels are slow and unscaled gradients
underflow: use bf16 there.

Under ``torchrun`` the process group uses NCCL on GPUs and gloo on the CPU
(:func:`init_distributed`).

Light at import: ``torch`` is imported inside the functions that need it, so reading a
configuration stays cheap.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from nas.errors import NasError

if TYPE_CHECKING:
    import torch

DEVICES = "auto, cpu, cuda or cuda:N"
PRECISIONS = ("fp32", "bf16", "fp16")
_SPEC = re.compile(r"auto|cpu|cuda(:\d+)?")

#: the device of the run in progress (``None``: the CPU) and its training precision
_CURRENT: ContextVar[Any] = ContextVar("nas_device", default=None)
_PRECISION: ContextVar[str] = ContextVar("nas_precision", default="fp32")


class DeviceError(NasError):
    """A device or precision setting is malformed, or names hardware that is not here."""


def is_device_spec(spec: object) -> bool:
    """Whether ``spec`` is spelled as a device setting (:data:`DEVICES`)."""
    return isinstance(spec, str) and _SPEC.fullmatch(spec.strip().lower()) is not None


def check_device(spec: str) -> str:
    """``spec`` when it is a device setting (``auto``, ``cpu``, ``cuda``, ``cuda:N``), else a
    one-line error; checks the spelling only, not the hardware (a configuration written on
    a laptop for a GPU server stays valid)."""
    text = str(spec).strip().lower()
    if not _SPEC.fullmatch(text):
        raise DeviceError(f"device must be {DEVICES}, got {spec!r}")
    return text


def check_precision(precision: str) -> str:
    """``precision`` when it is one of :data:`PRECISIONS`, else a one-line error."""
    if precision not in PRECISIONS:
        raise DeviceError(f"precision must be {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def _local_rank() -> int | None:
    """This process's ``LOCAL_RANK`` under ``torchrun`` (``None`` outside it)."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.isdigit() else None


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """The ``torch.device`` of a setting: ``auto`` is ``cuda`` when
    ``torch.cuda.is_available()``, else ``cpu``; ``cuda`` under ``torchrun`` is this
    process's GPU (``cuda:$LOCAL_RANK``). A GPU that is not there is a one-line error.
    A ``torch.device`` is returned as it is (the tests' ``meta`` device)."""
    import torch

    if isinstance(spec, torch.device):
        return spec
    text = check_device("auto" if spec is None else spec)
    if text == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if text == "auto" and not available:
        return torch.device("cpu")
    if not available:
        raise DeviceError(f"device {text}: no CUDA GPU is available to torch "
                          f"{torch.__version__} here; use device: cpu (or auto)")
    if text in ("auto", "cuda"):
        rank = _local_rank()
        return torch.device("cuda", rank if rank is not None else torch.cuda.current_device())
    index, count = int(text.split(":")[1]), torch.cuda.device_count()
    if index >= count:
        raise DeviceError(f"device {text}: this machine has {count} CUDA GPU(s) "
                          f"(cuda:0 to cuda:{count - 1}); name one of them")
    return torch.device(text)


def current_device(default: torch.device | None = None) -> torch.device:
    """The device of the run in progress (:func:`use_device`); outside one, ``default``
    (the CPU when not given)."""
    import torch

    device = _CURRENT.get()
    if device is not None:
        return device
    return default if default is not None else torch.device("cpu")


def current_precision() -> str:
    """The training precision of the run in progress (:func:`use_device`), fp32 outside
    one."""
    return _PRECISION.get()


@contextlib.contextmanager
def use_device(spec: str | torch.device | None, precision: str = "fp32"
               ) -> Iterator[torch.device]:
    """Make ``spec`` (resolved) the device, and ``precision`` the training precision, of
    everything run inside the block; a CUDA device also becomes torch's current one, so
    that code calling ``.cuda()`` agrees. fp16 off CUDA is refused here, before any
    stage."""
    device = resolve_device(spec)
    autocast(precision, device)  # the checks only: a bad pair fails before the run
    token, ptoken = _CURRENT.set(device), _PRECISION.set(precision)
    try:
        if device.type == "cuda":
            import torch

            with torch.cuda.device(device):
                yield device
        else:
            yield device
    finally:
        _CURRENT.reset(token)
        _PRECISION.reset(ptoken)


def map_tensors(batch: Any, fn: Callable[[Any], Any]) -> Any:
    """``batch`` with ``fn`` applied to each tensor of it (a tensor, or dicts, lists and
    tuples nesting tensors); other values are kept as they are."""
    import torch

    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        return {k: map_tensors(v, fn) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(map_tensors(v, fn) for v in batch)
    return batch


def to_device(batch: Any, device: torch.device | None = None) -> Any:
    """A batch's tensors on ``device`` (default :func:`current_device`); a tensor already
    there is returned as it is (no copy: CPU results stay bit for bit the same)."""
    target = device if device is not None else current_device()
    return map_tensors(batch, lambda t: t.to(target))


def table_rows(table: Any, index: torch.Tensor, like: torch.Tensor, axis: int = 0
               ) -> torch.Tensor:
    """The rows of a host table (a NumPy array of teacher logits or probe outputs, kept
    on the CPU) picked by a batch's ``index`` (on any device), as float32 on the device of
    ``like`` (the student's output the rows are compared with); ``axis`` 1 picks columns
    of a (P, N, C) table."""
    import numpy as np
    import torch

    rows = index.cpu().numpy()
    picked = table[rows] if axis == 0 else table[:, rows]
    out = torch.from_numpy(np.asarray(picked, dtype=np.float32))
    return out if out.device == like.device else out.to(like.device)


def place(model: Any, device: torch.device | None = None) -> Any:
    """``model`` (a ``torch.nn.Module``) moved to ``device`` (default
    :func:`current_device`) in place, and returned: the one call by which recipes,
    evaluators and the teacher put what they build on the run's device."""
    return model.to(device if device is not None else current_device())


def module_device(model: Any) -> torch.device:
    """The device of a module's first parameter or buffer (the CPU when it has none)."""
    import torch

    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The forward pass's context for ``precision``: nothing for fp32, else
    ``torch.autocast`` to bf16 or fp16 on ``device``'s type."""
    check_precision(precision)
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    if precision == "fp16" and device.type != "cuda":
        raise DeviceError(f"precision fp16 needs a CUDA device, the run's is {device}; use "
                          "bf16 (or fp32) on the CPU")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> Any:
    """A ``torch.amp.GradScaler`` for fp16 on CUDA (loss scaling keeps small fp16
    gradients from flushing to zero: Micikevicius et al., 2018, §3.2); ``None`` otherwise
    (fp32, and bf16 with fp32's exponent range, need none)."""
    check_precision(precision)
    if precision != "fp16" or device.type != "cuda":
        return None
    import torch

    return torch.amp.GradScaler("cuda")


def distributed_backend(device: torch.device) -> str:
    """The process-group backend for ``device``: NCCL on GPUs, gloo on the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def init_distributed(device: torch.device) -> bool:
    """Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment), join the process group
    with :func:`distributed_backend` (GPU ``device``: made this process's current GPU
    first, as NCCL requires); returns whether a group is initialised. Outside ``torchrun``
    nothing happens."""
    import torch
    from torch import distributed as dist

    if not dist.is_available():
        return False
    if dist.is_initialized():
        return True
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(distributed_backend(device))
    return True


def describe(device: torch.device) -> str:
    """The device for a log line or a result: ``cpu``, or ``cuda:0 (NVIDIA H100 ...)``."""
    if device.type != "cuda":
        return str(device)
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


__all__ = ["DEVICES", "PRECISIONS", "DeviceError", "autocast", "check_device",
           "check_precision", "current_device", "current_precision", "describe",
           "distributed_backend", "grad_scaler", "init_distributed", "is_device_spec",
           "map_tensors", "module_device", "place", "resolve_device", "table_rows",
           "to_device", "use_device"]
