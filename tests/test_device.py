"""The run's device and precision (``nas.device``): settings, the training loop on a device
and in mixed precision, CUDA-event timing, and that every evaluator's models and batches
follow the device setting.

No GPU is needed: the "follows the device" checks run on PyTorch's ``meta`` device,
where tensors have shapes but no data. A model or batch that skipped the setting stays
on the CPU and meets a meta tensor in some op, which fails with a device mismatch; code
that placed everything gets past every forward pass and fails only where a number is
first read out of a meta tensor (a loss logged, a prediction counted). The tests assert
the second kind of failure, and that the first kind appears when placement is skipped.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch import nn

from nas import device as nd
from nas.errors import NasError
from nas.train import Trainer, TrainSettings

#: what torch says when a tensor on one device meets one on another
MISMATCH = re.compile(r"(is not on the expected device|to be on the same device|"
                      r"Expected a '\w+' device type)")
#: what torch says when a number is read out of a meta tensor (shape-only, no data)
META_READ = re.compile(r"(meta tensors?|no data|register_meta|data-dependent)")


class _NoDeviceMix(torch.overrides.TorchFunctionMode):
    """Raise where an op meets a meta tensor and a CPU tensor that is not a scalar.

    On a GPU such an op fails ("Expected all tensors to be on the same device"); on the
    meta device many ops let it through (a loss of meta logits against CPU labels computes
    a meta result), so without this mode a label or index left on the CPU goes unseen
    until the first run on a real GPU. What a GPU allows stays allowed: a CPU scalar
    beside GPU tensors, CPU indices into a GPU tensor, and the copies that move a tensor
    (``to``, ``copy_``, ``cpu``)."""

    MOVES = frozenset({"to", "copy_", "cpu", "new_tensor", "tensor", "as_tensor"})

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        internal = name.startswith("_") and not name.startswith("__")  # module.to()'s
        if name not in self.MOVES and not internal:
            tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs))
                       if isinstance(t, torch.Tensor)]
            if name in ("__getitem__", "index_select") and tensors:
                tensors = [tensors[0], *(t for t in tensors[1:] if t.device.type == "meta")]
            on_meta = any(t.device.type == "meta" for t in tensors)
            on_cpu = [t for t in tensors if t.device.type == "cpu" and t.ndim > 0]
            if on_meta and on_cpu:
                raise RuntimeError(f"Expected all tensors to be on the same device: {name} "
                                   f"got a CPU tensor of shape {tuple(on_cpu[0].shape)} "
                                   "beside meta tensors")
        return func(*args, **kwargs)


def on_meta() -> Any:
    """The run's device set to ``meta`` with :class:`_NoDeviceMix` watching every op."""
    import contextlib

    stack = contextlib.ExitStack()
    stack.enter_context(nd.use_device(torch.device("meta")))
    stack.enter_context(_NoDeviceMix())
    return stack


def test_the_device_mix_check_fails_a_loss_against_labels_left_on_the_cpu() -> None:
    """The check can fail: meta logits against CPU labels (what a GPU refuses) raise."""
    logits = torch.zeros(4, 2, device="meta")
    with _NoDeviceMix(), pytest.raises(RuntimeError, match=MISMATCH):
        torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 0, 1]))
    with _NoDeviceMix(), pytest.raises(RuntimeError, match=MISMATCH):
        torch.zeros(8, 2)[torch.tensor([1, 2], device="meta")]  # CPU table, device index
    with _NoDeviceMix():  # allowed on a GPU too: CPU indices, a CPU scalar, a copy
        logits[torch.tensor([1, 2])]
        logits * torch.tensor(2.0)
        torch.zeros(2).to("meta")


# ------------------------------------------------------------------ the settings
@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:1", " CUDA:0 "])
def test_device_settings_are_spelled_as_documented(spec: str) -> None:
    assert nd.is_device_spec(spec)
    assert nd.check_device(spec) == spec.strip().lower()


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "mps", "", "cpu:0"])
def test_a_misspelt_device_is_one_line_naming_the_choices(spec: str) -> None:
    assert not nd.is_device_spec(spec)
    with pytest.raises(NasError, match=r"device must be auto, cpu, cuda or cuda:N"):
        nd.check_device(spec)


def test_auto_is_the_cpu_without_a_gpu_and_a_missing_gpu_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert nd.resolve_device("auto") == torch.device("cpu")
    assert nd.resolve_device(None) == torch.device("cpu")
    assert nd.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(nd.DeviceError, match=r"device cuda: no CUDA GPU .* use device: cpu"):
        nd.resolve_device("cuda")


def test_auto_is_the_gpu_when_there_is_one_and_its_index_is_checked(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert nd.resolve_device("auto") == torch.device("cuda", 0)
    assert nd.resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(nd.DeviceError, match=r"cuda:7: this machine has 2 CUDA GPU"):
        nd.resolve_device("cuda:7")
    monkeypatch.setenv("LOCAL_RANK", "1")  # under torchrun: this process's GPU
    assert nd.resolve_device("cuda") == torch.device("cuda", 1)


def test_precision_settings_autocast_and_the_scaler() -> None:
    cpu = torch.device("cpu")
    with pytest.raises(NasError, match=r"precision must be fp32, bf16, fp16, got 'fp8'"):
        nd.check_precision("fp8")
    with pytest.raises(nd.DeviceError, match=r"fp16 needs a CUDA device.* use bf16"):
        nd.autocast("fp16", cpu)
    with pytest.raises(nd.DeviceError, match=r"fp16 needs a CUDA device"):
        with nd.use_device("cpu", "fp16"):
            pass
    assert nd.grad_scaler("fp32", cpu) is None and nd.grad_scaler("bf16", cpu) is None
    assert nd.grad_scaler("fp16", torch.device("meta")) is None  # scaling is CUDA's
    with nd.autocast("bf16", cpu):
        assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.bfloat16
    assert nd.distributed_backend(torch.device("cuda", 0)) == "nccl"
    assert nd.distributed_backend(cpu) == "gloo"


def test_use_device_scopes_the_device_and_precision() -> None:
    assert nd.current_device() == torch.device("cpu") and nd.current_precision() == "fp32"
    with nd.use_device(torch.device("meta")) as device:
        assert device == nd.current_device() == torch.device("meta")
        assert nd.place(nn.Linear(2, 2)).weight.device.type == "meta"
        with nd.use_device("cpu", "bf16"):
            assert nd.current_device() == torch.device("cpu")
            assert nd.current_precision() == "bf16"
        assert nd.current_device() == torch.device("meta") and nd.current_precision() == "fp32"
    assert nd.current_device() == torch.device("cpu") and nd.current_precision() == "fp32"


def test_table_rows_come_to_the_outputs_device() -> None:
    import numpy as np

    table = np.arange(12, dtype=np.float64).reshape(4, 3)
    rows = nd.table_rows(table, torch.tensor([2, 0]), torch.zeros(1))
    assert rows.dtype == torch.float32 and rows.tolist() == [[6, 7, 8], [0, 1, 2]]
    probes = np.arange(24).reshape(2, 4, 3)
    cols = nd.table_rows(probes, torch.tensor([1]), torch.zeros(1, device="meta"), axis=1)
    assert cols.device.type == "meta" and cols.shape == (2, 1, 3)


# ---------------------------------------------------------------- the training loop
class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.out(self.emb(batch["ids"]).mean(1))


def _batches(epoch: int, start: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(epoch)
    ids = torch.randint(0, 10, (4 * 8, 5), generator=g)
    labels = torch.randint(0, 2, (4 * 8,), generator=g)
    return [{"ids": ids[i * 8:(i + 1) * 8], "labels": labels[i * 8:(i + 1) * 8]}
            for i in range(start, 4)]


def _loss(net: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    return nn.functional.cross_entropy(net(b), b["labels"])


def _fit(**kwargs: Any) -> tuple[nn.Module, list[dict[str, float]]]:
    torch.manual_seed(0)
    model = _Tiny()
    result = Trainer(model, TrainSettings(epochs=2, lr=0.05), _batches, 4, _loss,
                     progress=False, seed=0, **kwargs).fit()
    return model, result.history


def test_fp32_is_bit_for_bit_the_default_and_bf16_trains_under_autocast() -> None:
    base, history = _fit()
    same, same_history = _fit(device=torch.device("cpu"), precision="fp32")
    assert history == same_history
    assert all(torch.equal(a, b) for a, b in zip(base.state_dict().values(),
                                                  same.state_dict().values(), strict=True))
    half, half_history = _fit(precision="bf16")
    assert half_history[-1]["loss"] < half_history[0]["loss"] + 0.5  # it trains, finitely
    assert half_history != history  # the forward ran in bf16
    assert next(half.parameters()).dtype == torch.float32  # master weights stay fp32
    with nd.use_device("cpu", "bf16"):  # the run's precision is the default
        _, ambient = _fit()
    assert ambient == half_history


def test_the_trainer_puts_its_model_and_batches_on_the_run_device() -> None:
    seen: list[torch.device] = []

    def loss(net: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        seen.extend({b["ids"].device, b["labels"].device, next(net.parameters()).device})
        return _loss(net, b)

    def before_step(step: int, b: dict[str, torch.Tensor]) -> None:
        # a hook reads the batch too (AdaBERT's architecture step computes a loss on it)
        seen.extend({b["ids"].device, b["labels"].device})

    model = _Tiny()
    with on_meta():
        trainer = Trainer(model, TrainSettings(), _batches, 4, loss, progress=False,
                          before_step=before_step)
        assert next(model.parameters()).device.type == "meta"
        with pytest.raises((RuntimeError, NotImplementedError), match=META_READ):
            trainer.fit()  # the loss is logged: a number out of a meta tensor
    assert {d.type for d in seen} == {"meta"}


# ----------------------------------------------------------------- CUDA-event timing
def test_timing_on_a_gpu_uses_cuda_events(monkeypatch) -> None:
    from nas import timing

    calls: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing
            self.at = 0.0

        def record(self) -> None:
            calls.append("record")
            self.at = float(len(calls))

        def elapsed_time(self, end: Event) -> float:
            return end.at - self.at

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "device", lambda device: _Nothing())
    t = timing.time_call(lambda: calls.append("call"), warmup=1, repeats=3,
                         device=torch.device("cuda", 0))
    # warm-up, sync, then record/call/record per repeat, one sync before reading
    assert calls == ["call", "sync"] + ["record", "call", "record"] * 3 + ["sync"]
    assert t.median_ms == 2.0 and t.repeats == 3


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ------------------------------------------- every evaluator follows the device setting
def _evaluate_on_meta(name: str) -> Exception | None:
    import test_evaluators as cases

    from evaluators.base import NullTrial
    from nas.space import get_space, small_config

    factory, _, *own = cases.CASES[name]
    space = (cases.OWN_SPACES[own[0]]() if own and own[0] in cases.OWN_SPACES
             else get_space(own[0]) if own else get_space("adabert", **small_config("adabert")))
    try:
        with on_meta():
            factory(space, None).evaluate(space.sample(0), NullTrial())
    except (RuntimeError, NotImplementedError) as err:
        return err
    return None


#: evaluators that run no model (a cost count, a recorded table)
NO_MODEL = {"costs", "penalty", "tabular"}


@pytest.mark.parametrize("name", ["distilled-retrain", "warmup-kd", "inherited",
                                  "inherited-kd", "progressive-transfer", "blockwise"])
def test_every_model_running_evaluator_computes_on_the_run_device(name: str) -> None:
    """On ``meta``, each evaluator gets through its forward passes (student, teacher,
    supernet, batches) and stops only at the first number read out."""
    err = _evaluate_on_meta(name)
    assert err is not None, f"{name} read no number out of a meta tensor"
    assert not MISMATCH.search(str(err)), f"{name}: a model or batch skipped the device: {err}"
    assert META_READ.search(str(err)), err


def test_the_model_running_cases_are_every_evaluator_but_the_model_free_ones() -> None:
    from evaluators.base import EVALUATORS

    cases = test_every_model_running_evaluator_computes_on_the_run_device.pytestmark[0]
    assert set(cases.args[1]) | NO_MODEL == set(EVALUATORS.names())


def test_a_model_that_skips_placement_fails_the_check(monkeypatch) -> None:
    """The check can fail: with the builders' placement switched off, the supernet and the
    child stay on the CPU and the evaluation never reads a meta tensor (here it computes
    on the CPU to the end; elsewhere it meets a meta tensor and fails on the mismatch)."""
    import nas.builder

    monkeypatch.setattr(nas.builder, "place", lambda model, device=None: model)
    err = _evaluate_on_meta("inherited")
    assert err is None or MISMATCH.search(str(err)), err


# ------------------------------------------------------ the command line and the API
def test_device_and_precision_in_the_experiment_and_on_the_command_line(tmp_path) -> None:
    from nas.config import ConfigError
    from nas.methods import load_experiment
    from recipes.common import snapshot

    exp = "experiments/tinybert_smoke.yaml"
    method, config = load_experiment(exp)
    assert (config.device, config.precision) == ("auto", "fp32")
    assert "device" not in snapshot(method.name, config)  # older run folders still resume
    _, config = load_experiment(exp, ["device=CUDA:1", "precision=bf16"])
    assert (config.device, config.precision) == ("cuda:1", "bf16")
    assert snapshot(method.name, config)["device"] == "cuda:1"
    with pytest.raises(ConfigError, match=r"device must be auto, cpu, cuda or cuda:N, got 'gpu'"):
        load_experiment(exp, ["device=gpu"])
    with pytest.raises(ConfigError, match=r"precision must be fp32 or bf16 or fp16"):
        load_experiment(exp, ["precision=fp8"])


def test_device_flags_are_one_line_errors_and_a_missing_gpu_stops_the_run_first(
        tmp_path, capsys, monkeypatch) -> None:
    from nas.cli import build_parser, main

    parser = build_parser()
    for argv in (["run", "x.yaml"], ["evaluate", "d"], ["predict", "d", "t"], ["bench", "d"]):
        assert parser.parse_args([*argv, "--device", "cuda:0"]).device == "cuda:0"
    assert parser.parse_args(["bench", "d"]).device == "cpu"  # bench times the CPU by default
    assert parser.parse_args(["predict", "d", "t"]).device == "auto"
    with pytest.raises(SystemExit) as stop:  # argparse's usage error, as one line
        main(["bench", "d", "--device", "gpu"])
    assert stop.value.code == 2
    assert "expected auto, cpu, cuda or cuda:N, got 'gpu'" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run_dir = tmp_path / "run"
    assert main(["run", "experiments/tinybert_smoke.yaml", "--device", "cuda",
                 "--run-dir", str(run_dir), "--no-progress"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "device cuda: no CUDA GPU" in line
    assert not run_dir.exists()  # refused before the run folder or any stage


def test_the_python_api_takes_device_and_precision(monkeypatch) -> None:
    import inspect

    import nas
    from nas.evaluate import evaluate_saved
    from nas.runtime import load
    from nas.teacher import finetune_teacher

    assert inspect.signature(nas.search).parameters["device"].default == "auto"
    assert inspect.signature(nas.search).parameters["precision"].default == "fp32"
    for fn in (evaluate_saved, load, finetune_teacher):
        assert "device" in inspect.signature(fn).parameters
    with pytest.raises(NasError, match=r"onnx runtime runs on the CPU"):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        load("no-such-dir", runtime="onnx", device="cuda")


@pytest.mark.slow  # loads the real teacher and the data: seconds, not the suite's budget
def test_a_recipe_stage_with_the_real_teacher_computes_on_the_run_device(tmp_path) -> None:
    """TinyBERT's general distillation (Jiao et al., 2020, §3.2), the stage with the most
    parts: the packaged MiniLM teacher loaded into the engine's design, the student with
    its width maps, and the batches all reach the meta device; the stage stops only at
    the first loss value read out."""
    from dataclasses import replace

    from nas.data import load_task
    from nas.distill.tinybert import _general_train
    from nas.methods import load_experiment
    from nas.teacher import resolve_teacher
    from nas.tokenization import load_tokenizer

    _, config = load_experiment("experiments/tinybert_smoke.yaml")
    tokenizer = load_tokenizer(resolve_teacher(None))
    corpus = load_task("sst2", "train").head(8)  # sentences stand in for the text corpus
    with on_meta():
        with pytest.raises((RuntimeError, NotImplementedError)) as err:
            _general_train(replace(config.general, batch_size=4), None,
                           config.student.build_space(2), "random", "uniform", corpus,
                           tokenizer, tmp_path, "key", {}, False)
    assert not MISMATCH.search(str(err.value)), err.value
    assert META_READ.search(str(err.value)), err.value


def test_the_differentiable_search_computes_on_the_run_device() -> None:
    """AdaBERT's search step (Chen et al., 2020, §3): the supernet, the architecture
    weights α, the efficiency term's cost table and the batches all reach the meta
    device; the search stops only at the first loss value read out."""
    import numpy as np
    from test_differentiable_any_space import tiny_adabert

    from nas.cost import batch_for
    from nas.distill.losses import kd_loss
    from searchers.base import SEARCHERS
    from searchers.supernet_training import KDSupernetTrainer

    space = tiny_adabert()
    teacher = np.random.default_rng(1).standard_normal((8, 2)).astype(np.float32)

    def batch(i: int) -> dict[str, torch.Tensor]:
        rows = torch.arange(i * 4, (i + 1) * 4) % 8
        return {**batch_for(space, 4, 8), "labels": rows % 2, "index": rows}

    def loss(out: Any, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return kd_loss(out.logits, nd.table_rows(teacher, b["index"], out.logits), b["labels"])

    with on_meta():
        from nas.builder import build_supernet

        trainer = KDSupernetTrainer(
            build_supernet(space), epochs=1, steps_per_epoch=2,
            train_batches=lambda epoch, start: [batch(i) for i in range(start, 2)],
            val_batches=lambda epoch: [batch(5)], task_loss=loss)
        searcher = SEARCHERS.get("differentiable")(seed=0, derive="argmax")
        with pytest.raises((RuntimeError, NotImplementedError)) as err:
            searcher.search(space, trainer)
    assert not MISMATCH.search(str(err.value)), err.value
    assert META_READ.search(str(err.value)), err.value


@pytest.mark.parametrize("method", ["activation", "gradient"])
def test_importance_sorting_computes_on_the_run_device(method: str) -> None:
    """The compress recipe's importance scores (heads, neurons, hidden channels) of a
    teacher loaded on the run's device, from calibration batches kept on the CPU."""
    from test_bert_subnet import small_hf_teacher

    from nas.compress.importance import importance_scores
    from nas.cost import batch_for
    from nas.hf import from_hf

    hf = small_hf_teacher(4)
    with on_meta():
        space, model = from_hf(hf)
        assert nd.module_device(model).type == "meta"
        batch = {**batch_for(space, batch_size=2, seq_len=6), "labels": torch.tensor([0, 1])}
        with pytest.raises((RuntimeError, NotImplementedError)) as err:
            importance_scores(model, [batch], method)
    assert not MISMATCH.search(str(err.value)), err.value
    assert META_READ.search(str(err.value)), err.value


def test_mixed_precision_results_are_cached_apart_and_fp32_keys_do_not_move() -> None:
    from nas.cache import settings_key
    from nas.teacher import FinetuneConfig, finetune_key

    fp32 = settings_key(a=1)
    with nd.use_device("cpu", "fp32"):
        assert settings_key(a=1) == fp32
    with nd.use_device("cpu", "bf16"):
        assert settings_key(a=1) != fp32
    config = FinetuneConfig()
    assert finetune_key("sst2", "t", ["d"], config) == \
        finetune_key("sst2", "t", ["d"], config, "fp32")
    assert finetune_key("sst2", "t", ["d"], config, "bf16") != \
        finetune_key("sst2", "t", ["d"], config)


def test_outside_a_run_the_loop_follows_the_model() -> None:
    model = _Tiny().to("meta")  # a script's own placement, no run device set
    trainer = Trainer(model, TrainSettings(), _batches, 4, _loss, progress=False)
    assert trainer.device.type == "meta" and nd.module_device(model).type == "meta"


def test_under_torchrun_the_group_is_nccl_on_gpus_and_gloo_on_the_cpu(monkeypatch) -> None:
    from torch import distributed as dist

    joined: list[str] = []
    current: list[torch.device] = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend: joined.append(backend))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: current.append(device))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not nd.init_distributed(torch.device("cpu")) and joined == []  # not torchrun
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert nd.init_distributed(torch.device("cuda", 1))
    assert nd.init_distributed(torch.device("cpu"))
    assert joined == ["nccl", "gloo"] and current == [torch.device("cuda", 1)]
