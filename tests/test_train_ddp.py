"""The training loop under DistributedDataParallel: 2 processes (gloo) on this machine
train like 1 process with the combined batch."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import distributed as dist
from torch import nn
from torch.nn import functional as F

from nas.checkpoint import load_state, save_state
from nas.train import Trainer, TrainSettings

N, BATCH = 29, 7  # batches of 7, 7, 7, 7, 1: uneven splits and a rank without rows
# SGD rather than Adam: attention's key bias has a zero gradient up to rounding noise,
# which Adam's normalisation would blow up into lr-sized steps that differ per run.
SETTINGS = TrainSettings(epochs=2, optimizer="sgd", lr=0.1, grad_accum=2, grad_clip=1.0,
                         checkpoint_every=2, warmup_fraction=0.2)


class TinyEncoder(nn.Module):
    """Embedding → one Transformer encoder layer (no dropout) → mean pool → classifier."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(30, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(16, 2)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.layer(self.emb(ids), src_key_padding_mask=~mask)  # (B, T, 16)
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return self.head(pooled)


def _batches(epoch: int, start: int):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 30, (N, 6), generator=g)
    mask = torch.arange(6)[None, :] < torch.randint(2, 7, (N, 1), generator=g)
    labels = (ids[:, 0] > 15).long()
    order = np.random.default_rng(epoch).permutation(N)
    for i in range(start * BATCH, N, BATCH):
        idx = torch.as_tensor(order[i:i + BATCH])
        yield {"inputs": {"ids": ids[idx], "mask": mask[idx]}, "labels": labels[idx],
               "split": "train"}  # nested, with a value that is not a tensor


def _train(checkpoint: Path | None) -> tuple[nn.Module, list[dict[str, float]]]:
    model, steps = TinyEncoder(), []

    def loss_fn(net: nn.Module, b: dict) -> torch.Tensor:
        return F.cross_entropy(net(b["inputs"]["ids"], b["inputs"]["mask"]), b["labels"])

    Trainer(model, SETTINGS, _batches, -(-N // BATCH), loss_fn, checkpoint=checkpoint,
            progress=False, after_step=lambda step, info: steps.append(info)).fit()
    return model, steps


def _worker(rank: int, world: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    torch.set_num_threads(1)
    try:
        model, steps = _train(Path(out) / "ddp.safetensors")
        save_state(Path(out) / f"rank{rank}.safetensors",
                   {"model": model.state_dict(), "steps": steps})
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two processes and a gloo group: 4-8 s
def test_two_processes_follow_the_one_process_loss_curve(tmp_path: Path) -> None:
    torch.multiprocessing.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2)
    single, single_steps = _train(None)
    ranks = [load_state(tmp_path / f"rank{r}.safetensors") for r in range(2)]

    assert len(single_steps) == 2 * 3  # ⌈5 batches / 2⌉ steps per epoch
    for rank in ranks:
        assert len(rank["steps"]) == len(single_steps)
        for got, want in zip(rank["steps"], single_steps, strict=True):
            assert abs(got["loss"] - want["loss"]) < 1e-5 * max(1.0, abs(want["loss"]))
            assert got["lr"] == want["lr"]
        for name, value in single.state_dict().items():
            torch.testing.assert_close(rank["model"][name], value, rtol=1e-4, atol=1e-5)
    for name, value in ranks[0]["model"].items():  # DDP keeps the replicas identical
        assert torch.equal(value, ranks[1]["model"][name]), name
    ckpt = load_state(tmp_path / "ddp.safetensors")  # written once, by rank 0
    assert len(ckpt["rng"]) == 2 and ckpt["position"] == {"epoch": 2, "batch": 0, "step": 6}
