"""The training loop: exact resume, accumulation, schedules, non-finite losses, settings."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from nas.checkpoint import CheckpointError, load_state
from nas.config import ConfigError, from_dict
from nas.train import (
    GeneratorState,
    NonFiniteLossError,
    Trainer,
    TrainSettings,
    default_param_groups,
    lr_factor,
)

N = 40
_data = torch.Generator().manual_seed(123)
X = torch.randint(0, 20, (N, 5), generator=_data)
Y = torch.randint(0, 3, (N,), generator=_data)


class TinyNet(nn.Module):
    """Embedding bag → linear → LayerNorm → dropout → classifier."""

    def __init__(self, dropout: float = 0.1, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(20, 8)
        self.mix = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x).mean(1)  # (B, 8)
        return self.head(self.drop(self.norm(torch.relu(self.mix(h)))))


def shuffled(batch_size: int, seed: int = 0):
    """A batch source over (X, Y): a seeded permutation per epoch, as the recipes do."""

    def batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
        order = np.random.default_rng(seed + epoch).permutation(N)
        for i in range(start * batch_size, N, batch_size):
            idx = torch.as_tensor(order[i:i + batch_size])
            yield {"x": X[idx], "y": Y[idx]}

    return batches, -(-N // batch_size)


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _run(settings: TrainSettings, ckpt: Path | None, *, model_seed: int = 0,
         noise_seed: int = 7, die_at: int | None = None, dropout: float = 0.1,
         batch_size: int = 6) -> tuple[nn.Module, Trainer, list[dict[str, float]]]:
    """Train TinyNet; the loss adds noise from a stateful generator; ``die_at``: the
    loss call that raises KeyboardInterrupt. Returns the model, trainer and step log."""
    model = TinyNet(dropout, model_seed)
    noise = torch.Generator().manual_seed(noise_seed)
    calls, steps = {"n": 0}, []

    def loss_fn(net: nn.Module, b: dict[str, torch.Tensor]):
        calls["n"] += 1
        if calls["n"] == die_at:
            raise KeyboardInterrupt
        logits = net(b["x"]) + 0.1 * torch.randn(b["x"].shape[0], 3, generator=noise)
        return F.cross_entropy(logits, b["y"]), {"acc": (logits.argmax(-1) == b["y"])
                                                 .float().mean().item()}

    batches, per_epoch = shuffled(batch_size)
    trainer = Trainer(model, settings, batches, per_epoch, loss_fn, checkpoint=ckpt, seed=0,
                      stateful={"noise": GeneratorState(noise)}, progress=False,
                      after_step=lambda step, info: steps.append({"step": step, **info}))
    trainer.fit()
    return model, trainer, steps


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_interrupted_run_resumes_bit_identically(tmp_path: Path, grad_accum: int) -> None:
    settings = TrainSettings(epochs=3, lr=1e-2, warmup_fraction=0.2, grad_clip=1.0,
                             grad_accum=grad_accum, checkpoint_every=3)
    straight, done, straight_steps = _run(settings, tmp_path / "straight.safetensors")
    straight_rng = torch.get_rng_state()  # dropout's draws, all of them

    ckpt = tmp_path / "killed.safetensors"
    log: list[dict[str, float]] = []
    with pytest.raises(KeyboardInterrupt):
        _, _, log = _run(settings, ckpt, die_at=13)
    position = load_state(ckpt)["position"]
    assert position["batch"] != 0  # the last checkpoint is inside an epoch
    torch.manual_seed(999)  # the resumed process starts from other random states
    resumed, again, resumed_steps = _run(settings, ckpt, model_seed=5, noise_seed=99)

    for name, value in _weights(straight).items():
        assert torch.equal(value, resumed.state_dict()[name]), name
    assert again.history == done.history and len(done.history) == 3
    assert resumed_steps == straight_steps[position["step"]:]
    assert again.step == done.step == 3 * math.ceil(7 / grad_accum)
    assert torch.equal(torch.get_rng_state(), straight_rng)


def test_gradient_accumulation_equals_a_bigger_batch() -> None:
    results = []
    for batch_size, accum in [(12, 1), (4, 3)]:
        settings = TrainSettings(epochs=2, lr=5e-2, grad_accum=accum, grad_clip=0.5,
                                 warmup_fraction=0.25)
        model = TinyNet(dropout=0.0)
        batches, per_epoch = shuffled(batch_size)
        trainer = Trainer(model, settings, batches, per_epoch,
                          lambda net, b: F.cross_entropy(net(b["x"]), b["y"]), progress=False)
        result = trainer.fit()
        results.append((model, result))
    (big, big_result), (small, small_result) = results
    assert big_result.steps == small_result.steps == 8  # ⌈40/12⌉ × 2 epochs
    for name, value in big.state_dict().items():
        torch.testing.assert_close(small.state_dict()[name], value, rtol=1e-5, atol=1e-6)
    for a, b in zip(big_result.history, small_result.history, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def test_non_finite_loss_names_the_step_and_the_checkpoint(tmp_path: Path) -> None:
    calls = {"n": 0}

    def loss_fn(net: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        calls["n"] += 1
        loss = F.cross_entropy(net(b["x"]), b["y"])
        return loss * float("nan") if calls["n"] == 5 else loss

    batches, per_epoch = shuffled(6)
    ckpt = tmp_path / "c.safetensors"
    trainer = Trainer(TinyNet(), TrainSettings(checkpoint_every=3), batches, per_epoch,
                      loss_fn, checkpoint=ckpt, progress=False)
    with pytest.raises(NonFiniteLossError,
                       match=rf"loss is nan at step 5 \(epoch 1, batch 5\); the last good "
                             rf"checkpoint is {ckpt} \(step 3\)"):
        trainer.fit()
    calls["n"] = -10
    early = Trainer(TinyNet(), TrainSettings(), batches, per_epoch,
                    lambda net, b: torch.tensor(float("inf")), progress=False)
    with pytest.raises(NonFiniteLossError, match="step 1 .*no checkpoint was written yet"):
        early.fit()


def test_max_steps_stops_inside_an_epoch_and_a_finished_run_stays_finished(
        tmp_path: Path) -> None:
    settings = TrainSettings(epochs=5, max_steps=10, schedule="linear")
    ends: list[tuple[int, dict[str, float]]] = []
    batches, per_epoch = shuffled(6)  # 7 batches per epoch

    def trainer() -> Trainer:
        return Trainer(TinyNet(), settings, batches, per_epoch,
                       lambda net, b: F.cross_entropy(net(b["x"]), b["y"]),
                       checkpoint=tmp_path / "c.safetensors", progress=False,
                       on_epoch_end=lambda e, means: ends.append((e, means)) or {"dev": e})

    first = trainer()
    result = first.fit()
    assert result.steps == 10 and [row["step"] for row in result.history] == [7, 10]
    assert [e for e, _ in ends] == [0, 1] and [r["dev"] for r in result.history] == [0, 1]
    assert first.scheduler.get_last_lr()[0] == pytest.approx(0.0)  # linear to lr_min = 0
    again = trainer().fit()  # resumed from the final checkpoint: nothing left to do
    assert again.steps == 10 and again.history == result.history and len(ends) == 2


def test_schedules_by_hand() -> None:
    from transformers import get_linear_schedule_with_warmup

    s = TrainSettings(lr=2.0, schedule="linear", warmup_fraction=0.1)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2.0)
    hf = get_linear_schedule_with_warmup(opt, int(0.1 * 57), 57)
    for step in range(58):  # the teacher's schedule, bit for bit
        assert hf.lr_lambdas[0](step) == lr_factor(s, step, 57)
    cos = TrainSettings(lr=2.0, lr_min=0.5, warmup_fraction=0.2)
    # warm-up 0 → 1 over 2 of 10 steps, then cosine from 1 to lr_min/lr = 0.25
    assert [lr_factor(cos, t, 10) for t in (0, 1, 2, 6, 10)] == pytest.approx(
        [0.0, 0.5, 1.0, 0.25 + 0.75 * 0.5, 0.25])
    assert lr_factor(TrainSettings(schedule="constant"), 7, 10) == 1.0


def test_default_param_groups_skip_decay_on_biases_and_norms() -> None:
    model = TinyNet()
    decay, plain = default_param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in decay["params"]) == [
        "emb.weight", "head.weight", "mix.weight"]
    assert plain["weight_decay"] == 0.0 and len(plain["params"]) == 4
    assert len(default_param_groups(model, 0.0)) == 1


def test_sgd_with_cosine_to_lr_min_for_the_search(tmp_path: Path) -> None:
    """AdaBERT's weight steps: SGD momentum 0.9, cosine to lr_min, hooks before each step."""
    settings = TrainSettings(optimizer="sgd", lr=0.1, lr_min=0.01, weight_decay=0.0,
                             grad_clip=5.0)
    seen: list[int] = []
    batches, per_epoch = shuffled(8)
    trainer = Trainer(TinyNet(), settings, batches, per_epoch,
                      lambda net, b: F.cross_entropy(net(b["x"]), b["y"]), progress=False,
                      before_step=lambda step, b: seen.append(step) or {"arch_loss": 1.5})
    result = trainer.fit()
    assert isinstance(trainer.optimizer, torch.optim.SGD)
    assert trainer.optimizer.param_groups[0]["momentum"] == 0.9
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(0.01)
    assert seen == list(range(5)) and result.history[0]["arch_loss"] == 1.5


def test_checkpoint_of_another_layout_or_stage_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "c.safetensors"
    batches, per_epoch = shuffled(8)

    def loss(net: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(net(b["x"]), b["y"])

    Trainer(TinyNet(), TrainSettings(), batches, per_epoch, loss, checkpoint=ckpt,
            progress=False).fit()
    with pytest.raises(CheckpointError, match="grad_accum"):
        Trainer(TinyNet(), TrainSettings(grad_accum=2), batches, per_epoch, loss,
                checkpoint=ckpt, progress=False).fit()
    with pytest.raises(CheckpointError, match="lacks the state of 'alphas'"):
        Trainer(TinyNet(), TrainSettings(), batches, per_epoch, loss, checkpoint=ckpt,
                stateful={"alphas": nn.Linear(1, 1)}, progress=False).fit()
    with pytest.raises(ValueError, match="gave 4 batches for epoch 0"):
        Trainer(TinyNet(), TrainSettings(), lambda e, s: batches(e, s + 1), per_epoch, loss,
                progress=False).fit()


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("epochs", 0, ">= 1"), ("max_steps", 0, "None or >= 1"), ("batch_size", 0, ">= 1"),
    ("lr", 0.0, "> 0"), ("optimizer", "adam", "adamw or sgd"), ("momentum", 1.0, r"\[0, 1\)"),
    ("weight_decay", -0.1, ">= 0"), ("schedule", "step", "cosine or linear or constant"),
    ("warmup_fraction", 1.0, r"\[0, 1\)"), ("lr_min", 1.0, r"\[0, lr=0.001\]"),
    ("grad_clip", 0.0, "None"), ("grad_accum", 0, ">= 1"), ("checkpoint_every", 0, ">= 1"),
])
def test_settings_range_checks(name: str, value: object, allowed: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be .*{allowed}.*, got {value!r}$"):
        TrainSettings(**{name: value})
    with pytest.raises(ConfigError, match=rf"^exp.yaml:train: {name} must be"):
        from_dict(TrainSettings, {name: value}, "exp.yaml:train")
