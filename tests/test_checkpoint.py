"""The checkpoint format: exact round trips of training state, refusal of anything else."""

from __future__ import annotations

import json
import math
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from nas.checkpoint import (
    CheckpointError,
    atomic_write_json,
    atomic_write_text,
    canonical_header,
    canonical_safetensors,
    load_state,
    save_safetensors,
    save_state,
)
from nas.errors import NasError
from nas.rundir import RunDir


def _same(a: object, b: object) -> bool:
    """Equal values of equal types, tensors and arrays compared exactly (NaN == NaN)."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):  # an OrderedDict state dict comes back as a dict
        if not isinstance(b, dict):
            return False
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_same, a, b))  # type: ignore[arg-type]  # b: a list or tuple too
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]  # b: a float too (same type)
    return a == b


def _training_state() -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, T_max=10)
    for _ in range(2):
        model(torch.randn(5, 3)).sum().backward()
        optim.step()
        sched.step()
    gen = torch.Generator().manual_seed(3)
    torch.rand(2, generator=gen)
    rng = np.random.default_rng(7)
    rng.random()
    py = random.Random(5)
    return {"model": model.state_dict(), "optimizer": optim.state_dict(),
            "scheduler": sched.state_dict(), "torch_rng": torch.get_rng_state(),
            "generator": gen.get_state(), "numpy": rng.bit_generator.state,
            "mt19937": np.random.MT19937(1).state, "python": py.getstate()}


def test_training_state_round_trips_exactly(tmp_path: Path) -> None:
    state = _training_state()
    save_state(tmp_path / "s.safetensors", state)
    back = load_state(tmp_path / "s.safetensors")
    assert _same(state, back)
    assert isinstance(back["python"][1], tuple)
    assert all(isinstance(k, int) for k in back["optimizer"]["state"])
    # the restored states drive the same random numbers
    py = random.Random()
    py.setstate(back["python"])
    ref = random.Random(5)
    assert py.random() == ref.random()
    gen = torch.Generator()
    gen.set_state(back["generator"])
    assert torch.equal(torch.rand(3, generator=gen),
                       torch.rand(3, generator=torch.Generator().set_state(state["generator"])))
    bits = np.random.PCG64()
    bits.state = back["numpy"]
    assert np.random.Generator(bits).random() == np.random.default_rng(7).random(2)[1]


def test_odd_values_round_trip(tmp_path: Path) -> None:
    base = torch.arange(12.0).reshape(3, 4)
    state = {
        "floats": [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, float("nan"), float("inf"),
                   -float("inf"), -0.0],
        "big": 2**200 + 1, "flags": (True, False, None), "text": "é/\"x\"",
        "keys": {0: "a", "0": "b", (1, 2): "c", 2.5: "d", None: "e"},
        "tag_lookalike": {"__tensor__": "not a tensor"},
        "transposed": base.T, "row": base[1], "same": base, "again": base,
        "empty": torch.zeros(0, 3), "scalar": torch.tensor(2.5, dtype=torch.float64),
        "ints": torch.tensor([1, -2], dtype=torch.int8), "mask": torch.tensor([True, False]),
        "half": torch.randn(3).to(torch.bfloat16),
        "array": np.arange(6, dtype=np.uint32).reshape(2, 3), "npfloat": np.float32(0.5),
    }
    save_state(tmp_path / "s.safetensors", state)
    back = load_state(tmp_path / "s.safetensors")
    assert _same({**state, "npfloat": 0.5}, back)
    assert math.copysign(1.0, back["floats"][-1]) == -1.0
    assert back["transposed"].is_contiguous()


def test_unsupported_values_are_named(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="extra/obj is a object"):
        save_state(tmp_path / "s.safetensors", {"extra": {"obj": object()}})
    assert not list(tmp_path.iterdir())  # no file, no temporary left behind


class _Exploit:
    """Unpickling this creates ``marker``: loading a pickle would run code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def test_a_pickle_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"model": _Exploit(marker)})
    pickle.loads(payload)  # unpickle-ok: our payload is live (it creates the marker)
    assert marker.exists()
    marker.unlink()
    raw = tmp_path / "raw.pt"
    raw.write_bytes(payload)
    with pytest.raises(CheckpointError, match="not a readable checkpoint") as err:
        load_state(raw)
    assert "\n" not in str(err.value) and str(raw) in str(err.value)
    zipped = tmp_path / "zipped.pt"
    torch.save({"model": _Exploit(marker)}, zipped)  # torch's zip+pickle format
    with pytest.raises(CheckpointError, match="--resume"):
        load_state(zipped)
    assert not marker.exists()


def test_broken_files_raise_one_line_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    save_state(good, {"w": torch.randn(50), "n": 1})
    data = good.read_bytes()
    cases = {
        "empty": b"",
        "short": data[:5],
        "truncated": data[:-7],
        "padded": data + b"\0" * 3,
        "header": data[:8] + b"{" * (len(data) - 8),
        "text": b"hello, this is not a checkpoint at all",
    }
    for name, content in cases.items():
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(content)
        with pytest.raises(CheckpointError) as err:
            load_state(path)
        message = str(err.value)
        assert isinstance(err.value, NasError) and "\n" not in message, name
        assert str(path) in message and "delete it" in message, name


def test_other_formats_and_versions_are_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    weights = tmp_path / "weights.safetensors"
    save_file({"w": torch.zeros(2)}, str(weights))
    with pytest.raises(CheckpointError, match="without a training state"):
        load_state(weights)
    future = tmp_path / "future.safetensors"
    save_file({}, str(future), metadata={"format": "nas-state", "version": "99",
                                         "nas_state": "{}"})
    with pytest.raises(CheckpointError, match="version 99"):
        load_state(future)


def test_atomic_writes_leave_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    atomic_write_json(target, {"b": 1, "a": [1.5]})
    assert target.read_text() == '{\n  "a": [\n    1.5\n  ],\n  "b": 1\n}\n'
    atomic_write_text(target, "over")
    assert target.read_text() == "over"
    with pytest.raises(TypeError):
        atomic_write_json(target, {"x": object()})
    assert target.read_text() == "over"  # a failed write keeps the old file
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_rundir_checkpoints(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run", {"a": 1})
    state = {"search": {"opt": torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
                        .state_dict(), "step": 3}, "sums": {}}
    path = run.checkpoint_path()
    assert path == run.path / "checkpoint.safetensors"
    assert run.checkpoint_path("retrain_x.safetensors") == run.path / "retrain_x.safetensors"
    save_state(path, state)
    assert _same(load_state(path), state)
    run.remove_checkpoint()
    assert not path.exists()
    run.remove_checkpoint()  # nothing to remove: no error


def test_many_writers_never_collide(tmp_path: Path) -> None:
    """Temporary names are per process and call: concurrent writers never share one."""
    target = tmp_path / "shared.json"
    pids = []
    for i in range(3):
        pid = os.fork()
        if pid == 0:  # child: write many times, then leave without cleanup handlers
            try:
                for j in range(50):
                    atomic_write_json(target, {"writer": i, "n": j})
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    assert json.loads(target.read_text())["n"] == 49  # whole files only, the last write
    assert [p.name for p in tmp_path.iterdir()] == ["shared.json"]


def test_safetensors_headers_are_canonical(tmp_path: Path) -> None:
    """The safetensors library writes ``__metadata__`` in a hash map's order, which changes
    from call to call; the engine's writers sort it, so equal tensors give equal bytes."""
    from safetensors.torch import load_file, save

    tensors = {"b": torch.arange(3.0), "a": torch.ones(2, 2, dtype=torch.float16)}
    metadata = {"format": "pt", "nas_format": "x", "zeta": "1", "alpha": "2", "mid": "3"}
    raw = {save(tensors, metadata=metadata) for _ in range(12)}
    assert len({canonical_header(r) for r in raw}) == 1
    files = []
    for i in range(6):
        files.append(tmp_path / f"w{i}.safetensors")
        save_safetensors(tensors, files[-1], metadata)
    assert len({f.read_bytes() for f in files}) == 1
    data = files[0].read_bytes()
    n = int.from_bytes(data[:8], "little")
    assert n % 8 == 0
    header = data[8:8 + n].decode().rstrip(" ")
    assert header.startswith('{"__metadata__":{"alpha":"2","format":"pt","mid":"3",'
                             '"nas_format":"x","zeta":"1"},"a":')
    assert all(torch.equal(t, tensors[k]) for k, t in load_file(str(files[0])).items())
    # a file another library wrote is rewritten in place, and only when needed
    scrambled = [r for r in raw if r != data]
    assert scrambled  # the library's own order does vary (what this guards against)
    other = tmp_path / "other.safetensors"
    other.write_bytes(scrambled[0])
    canonical_safetensors(other)
    assert other.read_bytes() == data
