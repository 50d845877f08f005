"""AdaBERT end to end (Chen et al., 2020; SPEC §2).

fine-tuned teacher (cached) → probes (cached) → differentiable search over cells and
depth with hard Gumbel samples (only the sampled op runs), loss
(1−γ)·CE + γ·probe-KD + β·L_E → derived architecture → the derived child retrained with
distillation → dev evaluation → standalone export. ``searcher="random"`` replaces the
search by random architectures of the same space trained with the same recipe.

Everything lands in a :class:`~nas.rundir.RunDir`; every stage that finished is kept,
and ``resume=True`` continues an interrupted run from its last checkpoint.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from nas.architecture import Architecture
from nas.config import ConfigError
from nas.errors import NasError
from nas.methods import Method, RunOptions, load_experiment, register_method
from nas.rundir import RunDir

log = logging.getLogger("nas.adabert")


# ---------------------------------------------------------------------------- config


@dataclass
class DataSettings:
    max_train_examples: int | None = None  # a seeded random subset of train
    max_dev_examples: int | None = None
    val_fraction: float = 0.1  # carved from train for the architecture steps
    max_seq_len: int = 64


@dataclass
class SearchSettings:
    epochs: int = 1
    batch_size: int = 32
    gamma: float = 0.8  # weight of probe KD
    beta: float = 4.0  # weight of the efficiency loss
    kd_temperature: float = 1.0
    lr: float = 2e-2
    lr_min: float = 5e-4
    arch_lr: float = 3e-4
    arch_weight_decay: float = 1e-3
    # fraction of the steps that train only the shared weights (α frozen, ops sampled
    # uniformly) before α starts to move; 0 = the paper's schedule
    arch_warmup: float = 0.0
    tau_every: int = 100
    checkpoint_every: int = 50  # steps

    def __post_init__(self) -> None:
        if not 0.0 <= self.arch_warmup < 1.0:
            raise ValueError(f"arch_warmup must be in [0, 1), got {self.arch_warmup}")


@dataclass
class RetrainSettings:
    epochs: int = 1
    batch_size: int = 32
    lr: float = 1e-3
    gamma: float = 0.8
    kd_temperature: float = 1.0


@dataclass
class AdaBertConfig:
    name: str
    task: str
    teacher: str | None = None
    seed: int = 0
    data: DataSettings = field(default_factory=DataSettings)
    teacher_finetune: dict = field(default_factory=dict)
    space: dict = field(default_factory=dict)
    search: SearchSettings = field(default_factory=SearchSettings)
    retrain: RetrainSettings = field(default_factory=RetrainSettings)
    random_samples: int = 3
    latency_repeats: int = 10


def load_config(path: str | Path) -> AdaBertConfig:
    """An AdaBERT experiment file's typed configuration (``method: adabert`` required)."""
    method, config = load_experiment(path)
    if not isinstance(method, AdaBert):
        raise ConfigError(f"{path}: method {method.name!r} is not adabert")
    return config


# ------------------------------------------------------------------------- helpers


def _to_model_batch(batch: dict[str, torch.Tensor], pair: bool) -> dict[str, torch.Tensor]:
    """AdaBERT feeds pairs as two separately tokenised sentences (SPEC §2)."""
    if pair:
        batch = {**batch, "input_ids": batch["input_ids_a"],
                 "attention_mask": batch["attention_mask_a"]}
    return batch


def _loss(model: Any, out: Any, batch: Mapping[str, torch.Tensor], probes: np.ndarray,
          gamma: float, temperature: float) -> torch.Tensor:
    """(1−γ)·CE + γ·probe KD; student layer logits = the shared classifier on each
    active cell's pooled output (SPEC §2)."""
    from nas.distill.losses import probe_distillation_loss

    labels = batch["labels"]
    ce = F.cross_entropy(out.logits, labels)
    if gamma == 0.0:
        return ce
    classifier = model.nodes["readout"].classifier
    layer_logits = [classifier(h) for h in out.records["layer_features"]]
    probe = torch.from_numpy(np.asarray(probes[:, batch["index"].numpy()], dtype=np.float32))
    kd = probe_distillation_loss(layer_logits, probe, labels, temperature)
    return (1.0 - gamma) * ce + gamma * kd


def teacher_embedding_init(teacher_dir: str, dim: int) -> torch.Tensor:
    """The teacher's word embeddings factorised to ``dim`` (principal components)."""
    from nas.teacher import load_teacher

    weight = load_teacher(teacher_dir).get_input_embeddings().weight.detach().float()
    centred = weight - weight.mean(0, keepdim=True)
    # Exact SVD, not torch.pca_lowrank: the randomised one draws from the global RNG, so
    # the student's initialisation depended on whether the teacher came from the cache.
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    projected = centred @ vh[:dim].T
    return projected * (weight.std() / projected.std())  # keep the teacher's scale


def _init_embeddings(model: Any, table: torch.Tensor) -> None:
    with torch.no_grad():
        emb = model.nodes["emb"].word_embeddings.weight
        emb[:, : table.shape[1]].copy_(table[: emb.shape[0]])


@torch.no_grad()
def evaluate(model: Any, batches: list[dict[str, torch.Tensor]], metric: str) -> dict[str, float]:
    from nas.teacher import classification_metrics

    model.eval()
    preds, labels = [], []
    for b in batches:
        preds.append(model(b).logits.argmax(-1))
        labels.append(b["labels"])
    return classification_metrics(torch.cat(preds).numpy(), torch.cat(labels).numpy(), metric)


# --------------------------------------------------------------------------- run


class AdaBertRun:
    """One run of the recipe; each method is a stage whose result is kept on disk."""

    def __init__(self, config: AdaBertConfig, run_dir: str | Path, data_dir: str | None = None,
                 resume: bool = False, progress: bool = True) -> None:
        self.cfg = config
        self.data_dir = data_dir
        self.progress = progress
        self.run = RunDir(run_dir, {"method": "adabert", **asdict(config)}, resume=resume)
        torch.manual_seed(config.seed)

    # -- stages ------------------------------------------------------------------
    def prepare(self) -> None:
        from nas.data import load_task, train_val_split
        from nas.distill.cache import cached_probe_logits
        from nas.space import get_space
        from nas.teacher import FinetuneConfig, finetune_teacher
        from nas.tokenization import load_tokenizer

        cfg = self.cfg
        log.info("stage 1/5: teacher (fine-tuned on %s, cached)", cfg.task)
        ft = finetune_teacher(cfg.task, cfg.teacher, self.data_dir,
                              config=FinetuneConfig(**cfg.teacher_finetune),
                              progress=self.progress)
        self.teacher = ft
        self.run.log("teacher", model_dir=ft.model_dir, metrics=ft.metrics,
                     from_cache=ft.from_cache)

        train = load_task(cfg.task, "train", self.data_dir)
        if cfg.data.max_train_examples and cfg.data.max_train_examples < len(train):
            rng = np.random.default_rng(cfg.seed)
            train = train.subset(np.sort(rng.permutation(len(train))
                                         [: cfg.data.max_train_examples]).tolist())
        self.train = train
        self.search_train, self.search_val = train_val_split(train, cfg.data.val_fraction,
                                                             cfg.seed)
        self.dev = load_task(cfg.task, "dev", self.data_dir).head(cfg.data.max_dev_examples)
        self.pair = train.is_pair
        self.tokenizer = load_tokenizer(ft.model_dir)

        log.info("stage 2/5: teacher probes (cached)")
        kw = dict(max_seq_len=cfg.data.max_seq_len, progress=self.progress)
        self.probes = {
            "train": cached_probe_logits(ft.model_dir, train, **kw),
            "search_train": cached_probe_logits(ft.model_dir, train, self.search_train, **kw),
            "search_val": cached_probe_logits(ft.model_dir, train, self.search_val, **kw),
        }
        self.space = get_space("adabert", num_labels=train.num_labels, pair=self.pair,
                               **cfg.space)
        self.embedding_init = teacher_embedding_init(ft.model_dir,
                                                     self.space.config["hidden"])
        self.dev_batches = list(self._batches(self.dev, cfg.retrain.batch_size, shuffle=False))

    def _batches(self, data: Any, batch_size: int, shuffle: bool, seed: int = 0,
                 start: int = 0):
        from nas.data import iter_batches

        for b in iter_batches(data, self.tokenizer, batch_size, self.cfg.data.max_seq_len,
                              shuffle=shuffle, seed=seed, separate_b=self.pair,
                              start_batch=start):
            yield _to_model_batch(b, self.pair)

    def search(self) -> Architecture:
        """Stage 3: the differentiable search; checkpointed, resumable."""
        from nas.builder import build_supernet
        from searchers.differentiable import DifferentiableSearch, TemperatureSchedule

        done = self.run.load_json("derived_arch.json")
        if done is not None:
            log.info("stage 3/5: search already finished, derived %s", done["choices"])
            return self.space.validate(done["choices"])
        cfg, s = self.cfg, self.cfg.search
        per_epoch = math.ceil(len(self.search_train) / s.batch_size)
        total = s.epochs * per_epoch
        warmup = int(s.arch_warmup * total)
        supernet = build_supernet(self.space)
        _init_embeddings(supernet, self.embedding_init)
        probes = self.probes

        def task_loss(out, batch):
            source = probes["search_val" if batch.get("split") == "val" else "search_train"]
            return _loss(supernet, out, batch, source, s.gamma, s.kd_temperature)

        search = DifferentiableSearch(
            self.space, supernet, task_loss, total_steps=total, beta=s.beta, lr=s.lr,
            lr_min=s.lr_min, arch_lr=s.arch_lr, arch_weight_decay=s.arch_weight_decay,
            schedule=TemperatureSchedule(total - warmup, every=s.tau_every), seed=cfg.seed,
            record=("layer_features",), arch_warmup_steps=warmup)
        start_epoch, start_batch, sums = 0, 0, {}
        ckpt = self.run.load_checkpoint()
        if ckpt is not None:
            search.load_state_dict(ckpt["search"])
            start_epoch, start_batch, sums = ckpt["epoch"], ckpt["batch"], ckpt["sums"]
            log.info("resuming the search at epoch %d, batch %d (step %d)", start_epoch,
                     start_batch, search.step_count)
        log.info("stage 3/5: search, %d epochs × %d steps", s.epochs, per_epoch)
        t0 = time.time()
        bar = tqdm(total=total, initial=search.step_count, desc="search",
                   disable=not self.progress)
        for epoch in range(start_epoch, s.epochs):
            val = [{**b, "split": "val"} for b in self._batches(
                self.search_val, s.batch_size, shuffle=True, seed=cfg.seed + 10_000 + epoch)]
            batches = self._batches(self.search_train, s.batch_size, shuffle=True,
                                    seed=cfg.seed + epoch, start=start_batch)
            for i, batch in enumerate(batches, start=start_batch):
                info = search.step(batch, val[i % len(val)])
                for k, v in info.items():
                    if not math.isnan(v):  # arch_loss is NaN while α is frozen
                        sums[k] = sums.get(k, 0.0) + v
                        sums[f"n_{k}"] = sums.get(f"n_{k}", 0) + 1
                bar.update(1)
                bar.set_postfix(loss=f"{info['loss']:.3f}", tau=f"{info['tau']:.2f}")
                if search.step_count % s.checkpoint_every == 0:
                    self.run.save_checkpoint({"search": search.state_dict(), "epoch": epoch,
                                              "batch": i + 1, "sums": sums})
            start_batch = 0
            means = {k: v / sums[f"n_{k}"] for k, v in sums.items() if not k.startswith("n_")}
            probs = {k: v.tolist() for k, v in
                     ((c, torch.softmax(search.alphas.logits(c).detach(), -1))
                      for c in search.alphas.choices)}
            self.run.log("search_epoch", epoch=epoch + 1, step=search.step_count,
                         **means, entropy=search.alphas.entropy(),
                         argmax=dict(search.derive()), probs=probs)
            sums = {}
            self.run.save_checkpoint({"search": search.state_dict(), "epoch": epoch + 1,
                                      "batch": 0, "sums": sums})
        bar.close()
        arch = search.derive()
        space_config = {k: self.space.config[k] for k in
                        ("num_labels", "pair", "vocab_size", "hidden", "max_depth")}
        self.run.save_json("derived_arch.json", {**arch.to_dict(), "id": arch.id,
                                                 "space_config": space_config})
        self.run.log("derived", arch=dict(arch), id=arch.id, seconds=time.time() - t0)
        return arch

    def retrain(self, arch: Architecture, tag: str) -> tuple[Any, dict[str, Any]]:
        """Stage 4: train the child of ``arch`` from scratch with distillation, evaluate."""
        from nas.builder import build_child
        from nas.cost import count_costs, measure_latency

        cfg, r = self.cfg, self.cfg.retrain
        torch.manual_seed(cfg.seed)
        child = build_child(self.space, arch)
        _init_embeddings(child, self.embedding_init)
        opt = torch.optim.AdamW(child.parameters(), lr=r.lr, weight_decay=0.01)
        per_epoch = math.ceil(len(self.train) / r.batch_size)
        steps = r.epochs * per_epoch
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps))
        # A retrain of a deep random cell takes ~20 min here: keep a checkpoint per epoch
        # so that an interrupted run resumes at the last finished epoch.
        checkpoint = f"retrain_{tag}.pt"
        start_epoch, seconds_before = 0, 0.0
        state = self.run.load_checkpoint(checkpoint)
        if state is not None:
            child.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["rng"])
            start_epoch, seconds_before = state["epoch"], state["seconds"]
            log.info("resuming the retrain of %s at epoch %d", tag, start_epoch)
        t0 = time.time() - seconds_before
        bar = tqdm(total=steps, initial=start_epoch * per_epoch, desc=f"retrain {tag}",
                   disable=not self.progress)
        for epoch in range(start_epoch, r.epochs):
            child.train()
            for batch in self._batches(self.train, r.batch_size, shuffle=True,
                                       seed=cfg.seed + 20_000 + epoch):
                out = child(batch, record=("layer_features",))
                loss = _loss(child, out, batch, self.probes["train"], r.gamma, r.kd_temperature)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(child.parameters(), 5.0)
                opt.step()
                sched.step()
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}")
            if epoch + 1 < r.epochs:
                self.run.save_checkpoint(
                    {"model": child.state_dict(), "optimizer": opt.state_dict(),
                     "scheduler": sched.state_dict(), "rng": torch.get_rng_state(),
                     "epoch": epoch + 1, "seconds": time.time() - t0}, checkpoint)
        bar.close()
        seconds = time.time() - t0
        metrics = evaluate(child, self.dev_batches, self.dev.metric)
        costs = count_costs(self.space, arch, self.cfg.data.max_seq_len)
        latency = {}
        for bs in (1, 32):
            batch = next(self._batches(self.dev, bs, shuffle=False))
            latency[f"batch{bs}"] = measure_latency(child, batch,
                                                    repeats=cfg.latency_repeats).to_dict()
        result = {"tag": tag, "arch": dict(arch), "arch_id": arch.id, "dev": metrics,
                  "params": costs.params, "flops": costs.flops, "seq_len": costs.seq_len,
                  "latency": latency, "train_seconds": seconds}
        self.run.log("retrained", **result)
        (self.run.path / checkpoint).unlink(missing_ok=True)
        return child, result

    def teacher_costs(self) -> dict[str, Any]:
        from nas.cost import count_model_params, measure_latency
        from nas.teacher import load_teacher

        model = load_teacher(self.teacher.model_dir).eval()

        class _Adapter(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, b):
                keys = ("input_ids", "attention_mask", "token_type_ids")
                return self.m(**{k: b[k] for k in keys if k in b})

        latency = {}
        for bs in (1, 32):
            batch = next(self._batches(self.dev, bs, shuffle=False))
            latency[f"batch{bs}"] = measure_latency(_Adapter(model), batch,
                                                    repeats=self.cfg.latency_repeats).to_dict()
        return {"dev": self.teacher.metrics, "params": count_model_params(model),
                "flops": self._teacher_flops(model.config), "seq_len": self.cfg.data.max_seq_len,
                "latency": latency, "model_dir": self.teacher.model_dir}

    def _teacher_flops(self, config: Any) -> int:
        """The teacher's FLOPs per example at ``max_seq_len``, from the engine's design of
        the same shape (the cost model the students are counted with)."""
        from nas.cost import count_costs
        from nas.hf import space_kwargs_from_hf
        from nas.space import get_space

        name, kwargs = space_kwargs_from_hf(config)
        return count_costs(get_space(name, **kwargs), None, self.cfg.data.max_seq_len).flops

    def export(self, child: Any, arch: Architecture) -> Path:
        from nas.export import export

        log.info("stage 5/5: export")
        return export(self.space, arch, self.run.path / "export", model=child,
                      labels=list(self.train.label_names), tokenizer=self.teacher.model_dir,
                      max_length=self.cfg.data.max_seq_len, task=self.cfg.task,
                      overwrite=True)


def run_adabert(config: AdaBertConfig, run_dir: str | Path, *, data_dir: str | None = None,
                searcher: str = "differentiable", resume: bool = False,
                progress: bool = True, random_sample: int | None = None) -> dict[str, Any]:
    """Run the whole recipe; returns (and writes ``metrics.json``) the final metrics.

    ``random_sample=i`` retrains only the i-th random architecture (others already
    finished are still reported), so separate processes can share the baseline.
    """
    if searcher not in ("differentiable", "random"):
        raise ValueError(f"searcher must be 'differentiable' or 'random', got {searcher!r}")
    if random_sample is not None and not 0 <= random_sample < config.random_samples:
        raise NasError(f"--random-sample {random_sample}: the config asks for "
                       f"{config.random_samples} random samples (0 to "
                       f"{config.random_samples - 1})")
    run = AdaBertRun(config, run_dir, data_dir, resume, progress)
    run.prepare()
    metrics: dict[str, Any] = run.run.load_json("metrics.json") or {}
    metrics["teacher"] = run.teacher_costs()
    if searcher == "differentiable":
        arch = run.search()
        searched = run.run.load_json("searched.json")
        if searched is None or not (run.run.path / "export" / "config.json").is_file():
            log.info("stage 4/5: retrain the derived architecture")
            child, searched = run.retrain(arch, "searched")
            run.export(child, arch)
            run.run.save_json("searched.json", searched)
        metrics["searched"] = searched
    from searchers.random_search import RandomSearcher

    sampler = RandomSearcher(run.space, seed=config.seed)
    for i in range(config.random_samples if searcher == "random" else 0):
        arch = sampler.ask().arch  # drawn for every i, so sample i is the same in every process
        name = f"random_{i}.json"
        if random_sample in (None, i) and not (run.run.path / name).is_file():
            _, done = run.retrain(arch, f"random{i}")
            run.run.save_json(name, done)
    # read back from disk: another process may have finished a sample meanwhile
    runs = [r for i in range(config.random_samples if searcher == "random" else 0)
            if (r := run.run.load_json(f"random_{i}.json")) is not None]
    if runs:
        from nas.teacher import metric_score

        scores = [metric_score(r["dev"], run.dev.metric) for r in runs]
        metrics["random"] = {"runs": runs, "metric": run.dev.metric,
                             "mean": statistics.mean(scores),
                             "std": statistics.stdev(scores) if len(scores) > 1 else 0.0}
    metrics["metric"] = run.dev.metric
    # Merge with what is on disk now: the searched and random runs may share a run
    # directory and finish in either order.
    run.run.save_json("metrics.json", {**(run.run.load_json("metrics.json") or {}), **metrics})
    run.run.log("done", searcher=searcher)
    return metrics


# ------------------------------------------------------------------------- method


@register_method("adabert")
class AdaBert(Method):
    """``method: adabert`` — the differentiable search, or the random baseline."""

    config_class = AdaBertConfig
    searchers = ("differentiable", "random")

    def run(self, config: AdaBertConfig, options: RunOptions) -> dict[str, Any]:
        # the random baseline adds a stage to an existing run: no --resume needed for that
        resume = options.resume or (options.searcher == "random"
                                    and (Path(options.run_dir) / "config.yaml").is_file())
        return run_adabert(config, options.run_dir, data_dir=options.data_dir,
                           searcher=options.searcher or "differentiable", resume=resume,
                           progress=options.progress,
                           random_sample=options.extra.get("random_sample"))

    def report_sections(self, run: RunDir, metrics: dict[str, Any]) -> tuple[list[str],
                                                                             list[Path]]:
        return [], _plots(run)


OP_GROUPS = {"conv": ("std_conv_3", "std_conv_5", "std_conv_7"),
             "dilated conv": ("dil_conv_3", "dil_conv_5", "dil_conv_7"),
             "pool": ("max_pool_3", "avg_pool_3"), "skip": ("skip",), "zero": ("zero",)}


def _plots(run: RunDir) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    epochs = run.read_log("search_epoch")
    if epochs:
        fig, (ax_d, ax_o) = plt.subplots(1, 2, figsize=(11, 4))
        xs = [e["epoch"] for e in epochs]
        depth = [e["probs"]["depth"] for e in epochs]
        for k in range(len(depth[0])):
            ax_d.plot(xs, [d[k] for d in depth], marker="o", label=f"K={k + 1}")
        ax_d.set(title="depth distribution", xlabel="epoch", ylabel="probability")
        ax_d.legend(fontsize=7, ncol=2)
        edges = [n for n in epochs[0]["probs"] if n != "depth"]
        from nas.ops.cnn import ADABERT_OPS

        for group, ops in OP_GROUPS.items():
            idx = [ADABERT_OPS.index(o) for o in ops]
            ys = [sum(sum(e["probs"][n][i] for i in idx) for n in edges) / len(edges)
                  for e in epochs]
            ax_o.plot(xs, ys, marker="o", label=group)
        ax_o.set(title="op distribution (mean over the 9 edges)", xlabel="epoch",
                 ylabel="probability")
        ax_o.legend(fontsize=8)
        fig.tight_layout()
        path = run.path / "arch_distribution.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out.append(path)
    return out
