"""Search a space of your own (``method: search``): any registered space, any searcher,
any evaluator, then the chosen architectures retrained with distillation and exported.

The steps, in order (:meth:`Search.stages`):

1. **teacher** — fine-tuned on the task (cached by its settings), as in every method;
2. **data** — the training subset, dev and the report split; ``data.val_fraction`` of
   the training subset is held out to score candidates, so that dev chooses nothing
   the search saw and the report split chooses nothing at all;
3. **search** —
   * a multi-trial searcher (``random``, ``tpe``, ``nsga2``, ``gp``, ``lanas``, or one a
     plug-in registers) proposes architectures on an Optuna study; ``evaluator`` scores
     each on the held-out part (default ``distilled-retrain``: the child trained from
     scratch on the rest with knowledge distillation from the teacher's logits, Hinton
     et al., 2015); ``objectives`` adds predicted or counted costs as minimised
     objectives; ``constraints`` go to the sampler as Optuna constraints;
   * or the one-shot ``differentiable`` searcher (GDAS, Dong & Yang 2019; AdaBERT, Chen
     et al. 2020, §3.2): one supernet trained with hard Gumbel samples of every op and
     depth choice, the KD loss and an optional efficiency term, then its argmax;
   * or a planned searcher (one that proposes a fixed list from what the run hands it,
     :class:`searchers.base.PlannedSearcher`): its list queued on the study and scored
     by the evaluator as any searcher's trials;
4. **final** — what ``final.select`` picks (the best trial, the Pareto front, or the
   front points nearest given speed-ups over the teacher) retrained on the whole training
   subset with ``final.seeds`` seeds, scored on dev and the report split;
5. **export** — the first chosen architecture at ``RUN/export``, every chosen one at
   ``RUN/final/<tag>/export``.

A space file next to the experiment needs no install: ``plugins: [my_space.py]``
(:mod:`nas.plugins`). :func:`nas.search` is the same run from Python.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from nas.errors import NasError
from nas.methods import RunOptions, register_method
from nas.rundir import RunDir
from recipes.common import (
    Recipe,
    mean_std,
    report_reference,
    run_study_stage,
)
from recipes.search_config import SearchConfig
from recipes.search_context import SearchContext
from recipes.search_select import select_trials
from recipes.search_study import one_shot_options, study_objective, supernet_trainer

log = logging.getLogger("nas.search")


@register_method("search")
class Search(Recipe[SearchConfig]):
    """``method: search`` — any space, any searcher, any evaluator (module docstring)."""

    config_class = SearchConfig
    context_class = SearchContext
    #: the exports' format (:func:`nas.export.export`): ``native`` (the runtime as remote
    #: code); compress asks for ``hf``, stock transformers where the shape allows
    export_format: ClassVar[str] = "native"
    uses_transfer: ClassVar[bool] = True

    def final_evaluator(self, ctx: SearchContext) -> tuple[str, dict[str, Any]]:
        """The final retrain's evaluator and settings (over ``retrain:``): the distilled
        retrain from scratch (compress: from the inherited weights)."""
        return "distilled-retrain", {}

    def default_searcher(self) -> str | None:
        return None  # the file's `searcher:` (default tpe)

    def check_searcher(self, searcher: Any) -> str | None:
        """Any registered searcher of any kind (plug-ins' included: the command line
        loads the experiment's plug-ins first), named or written ``{name, settings}``; a
        planned one whose run parts this method cannot hand is refused in one line.
        Returns the name."""
        if searcher is None:
            return None
        from searchers.base import resolve_searcher

        return resolve_searcher(searcher, provided=self.config_class.provided_searcher_parts,
                                where="--searcher").name

    def searcher_of(self, config: SearchConfig, options: RunOptions) -> str:
        return options.searcher or config.searcher_name

    def done_fields(self, config: SearchConfig, options: RunOptions) -> dict[str, Any]:
        return {"searcher": self.searcher_of(config, options)}

    def validate(self, config: SearchConfig, options: RunOptions, *, calibrate: bool = True
                 ) -> list[str]:
        """Before stage 1 (:meth:`Recipe.validate`'s checks after these): ``--searcher``
        checked against the file as ``searcher:`` is, a constraint no architecture meets
        (:meth:`check_feasible`) and a head that does not answer the task's labels
        (:meth:`check_head`)."""
        if options.searcher:
            config.check_searcher_name(options.searcher, "--searcher")
        notes = self.check_feasible(config, options, calibrate=calibrate)
        self.check_head(config, options)
        return notes + super().validate(config, options, calibrate=calibrate)

    def check_feasible(self, config: SearchConfig, options: RunOptions, *,
                       calibrate: bool = True) -> list[str]:
        """A constraint no architecture meets is refused in one line before stage 1
        (:func:`searchers.feasibility.check_feasible`: a few thousand architectures
        costed by the cost model). A latency limit calibrates the latency model for the
        space now if this machine's table has none (the note goes to the run log at
        stage 3); with ``calibrate=False`` (the dry run) it is checked on a cached table
        only, else left out and returned as a note saying how long calibrating takes."""
        from dataclasses import replace as replaced

        from nas.latency import cached_predictor, calibration_seconds, latency_source
        from searchers.feasibility import InfeasibleConstraintError, check_feasible

        space, _ = config.build_space(2)
        settings, notes = config.study_settings(), []
        latency_fn = None
        seq_len = config.data.max_seq_len
        if config.constraints.max_latency_ms is not None:
            runtime = config.latency_settings.runtime
            latency_fn = (self.latency_model(space, seq_len, runtime) if calibrate
                          else cached_predictor(space, seq_len=seq_len, runtime=runtime))
            if latency_fn is None:
                settings = replaced(settings, max_latency_ms=None)
                notes.append(f"constraints.max_latency_ms: not checked: no latency table for "
                             f"space {space.name!r} at {seq_len} tokens on this machine "
                             f"(calibrating takes up to {calibration_seconds(space):.0f} s; "
                             "the run does it first)")
        try:
            check_feasible(space, settings, seq_len=seq_len, seed=config.seed,
                           latency_fn=latency_fn)
        except InfeasibleConstraintError as err:
            # a latency limit refused on predictions: say which table made them, and how
            source = latency_source(latency_fn) if "max_latency_ms" in str(err) else None
            if source is None:
                raise
            raise InfeasibleConstraintError(f"{err}; {source}") from None
        return notes

    def check_head(self, config: SearchConfig, options: RunOptions) -> None:
        """The space, built as stage 3 builds it (the task's label count, the teacher
        tokenizer's vocabulary), answers the task's labels
        (:func:`recipes.search_context.check_head`)."""
        from nas.data import load_task, resolve_task
        from nas.teacher import resolve_teacher
        from nas.tokenization import load_tokenizer
        from recipes.search_context import check_head

        labels = load_task(resolve_task(config.task), "train", options.data_dir).num_labels
        vocab = len(load_tokenizer(resolve_teacher(config.teacher)))
        check_head(config.build_space(labels, vocab)[0], labels)

    def latency_model(self, space: Any, seq_len: int, runtime: str = "torch") -> Any:
        """This machine's latency predictor for ``space`` on ``runtime`` (the ``latency:``
        section's; calibrated once and cached when its table has none:
        :func:`nas.latency.space_predictor`); what it did is logged and kept for the run
        log (:attr:`latency_notes`)."""
        from nas.latency import space_predictor

        if not hasattr(self, "latency_notes"):
            self.latency_notes: list[str] = []

        def note(message: str) -> None:
            log.info(message)
            self.latency_notes.append(message)

        return space_predictor(space, seq_len=seq_len, log=note, runtime=runtime)

    def stages(self, ctx: SearchContext) -> dict[str, Any]:
        search, chosen = self.search_stage(ctx, self.searcher_of(ctx.cfg, ctx.options))
        final = self.final(ctx, chosen)
        return {"search": search, "final": final, "searched": final[0]["seeds"][0]}

    def search_stage(self, ctx: SearchContext, name: str) -> tuple[dict[str, Any], list[Any]]:
        """Stage 3: ``(summary, [(tag, architecture, trial number)])``, by the searcher's
        kind: a one-shot search, a planned list queued on the study, or a study."""
        from searchers.base import SEARCHERS

        kind = SEARCHERS.kind_of(name)
        if kind == "one-shot":
            return self.one_shot(ctx, name)
        if kind == "planned":
            return self.planned(ctx, name)
        return self.multi_trial(ctx, name)

    # -- stage 3 -------------------------------------------------------------------
    def planned(self, ctx: SearchContext, name: str) -> tuple[dict[str, Any], list[Any]]:
        """A planned searcher: its list, from the run parts it asks for
        (:meth:`searcher_parts`), queued on the run's study, one trial each, scored by
        the configured evaluator; what it reports goes to the run log and the summary
        (under its name)."""
        with ctx.timed(name):
            plan = self.plan_of(ctx, name)
        seconds = ctx.seconds[name]
        ctx.run.log(name, **plan.info, seconds=seconds)
        ctx.stage(3, "%s: %d architecture(s) planned, %.2f s", name, len(plan.queue), seconds)
        summary, chosen = self.run_queue(ctx, name, plan.queue)
        if plan.info:
            summary[name] = {**plan.info, "seconds": seconds}
        return summary, chosen

    def plan_of(self, ctx: SearchContext, name: str) -> Any:
        """The :class:`~searchers.base.Plan` of the planned searcher ``name``, with the
        file's settings, over the run parts it asks for."""
        searcher = ctx.cfg.resolve_searcher(name).build()
        required, optional = searcher.parts()
        parts = self.searcher_parts(ctx, {*required, *optional})
        return searcher.plan(**{p: parts[p] for p in (*required, *optional) if p in parts})

    def searcher_parts(self, ctx: SearchContext, wanted: set[str]) -> dict[str, Any]:
        """The run parts a planned searcher asks for (``SEARCHER_PARTS``), each built only
        when wanted (the budget's latency model calibrates once)."""
        from searchers.optuna_bridge import Budget

        cfg = ctx.cfg
        limits = cfg.study_settings().budget_kwargs
        parts: dict[str, Any] = {"space": ctx.space, "n_trials": cfg.n_trials,
                                 "constraints": dict(limits),
                                 "final_ratios": [float(r) for r in cfg.final.ratios]
                                 if cfg.final.select == "latency_ratios" else []}
        if "budget" in wanted:
            # the latency model's notes reach the run log when the study starts
            latency_fn = (self.latency_model(ctx.space, ctx.max_seq_len,
                                             cfg.latency_settings.runtime)
                          if limits["max_latency_ms"] is not None else None)
            parts["budget"] = Budget(seq_len=ctx.max_seq_len, latency_fn=latency_fn, **limits)
        return parts

    def run_queue(self, ctx: SearchContext, name: str, queue: Sequence[tuple[str, Any]]
                  ) -> tuple[dict[str, Any], list[Any]]:
        """Architectures a method or a planned searcher chose, as the run's study, one
        trial each (:mod:`searchers.queued`)."""
        from searchers.queued import QueuedSearcher

        settings = replace(ctx.cfg.study_settings(), n_trials=len(queue))
        return self.multi_trial(ctx, name, factory=QueuedSearcher(name), queue=queue,
                                settings=settings)

    # -- stage 3 -------------------------------------------------------------------
    def multi_trial(self, ctx: SearchContext, name: str, *, factory: Any = None,
                    queue: Sequence[tuple[str, Any]] = (), settings: Any = None
                    ) -> tuple[dict[str, Any], list[Any]]:
        """The study: each proposal scored on the held-out part by the evaluator.
        ``factory``, ``queue`` and ``settings``: a method's own picks run as the study's
        trials (:func:`recipes.common.run_study_stage`), with the study's settings."""

        from searchers.loop import StudyOptions

        cfg = ctx.cfg
        settings = settings or cfg.study_settings()
        given = ctx.options.study or StudyOptions()
        study_options = replace(given, timeout=given.timeout or cfg.timeout,
                                storage=given.storage or cfg.storage,
                                workers=given.workers if given.workers != 1 else cfg.workers)
        ctx.options = replace(ctx.options, study=study_options)
        ctx.stage(3, "%s search over %s (%s architectures), %s, objectives %s", name,
                  ctx.space.name, f"{ctx.space.size():,}", cfg.evaluator.name,
                  ", ".join(cfg.objectives))
        if cfg.constraints.max_latency_ms is not None:  # the study's budget reads it
            self.latency_model(ctx.space, ctx.max_seq_len, cfg.latency_settings.runtime)
            for message in self.latency_notes:
                ctx.run.log("latency_model", note=message)
            self.latency_notes.clear()
        found = run_study_stage(ctx, searcher=name, space=ctx.space,
                                evaluator=study_objective(ctx, factory or name)[1],
                                settings=settings, default_trials=settings.n_trials,
                                parts=ctx.worker_parts(study_objective, name),
                                factory=factory, queue=queue)
        ctx.seconds["search"] = found.seconds
        if not found.trials:
            raise NasError(f"the {name} search finished no trial (see nas report "
                           f"{ctx.run.path}); loosen the constraints or add trials")
        teacher_ms = ctx.teacher_latency_ms() if cfg.final.select == "latency_ratios" else None
        chosen = select_trials(found.study, found.trials, cfg.final, teacher_ms=teacher_ms)
        summary = {"searcher": name, "study": found.spec.study_name,
                   **({"ratios_teacher_ms": teacher_ms} if teacher_ms is not None else {}),
                   **latency_scale(ctx, found.study.metric_names or cfg.objectives),
                   "n_trials": found.spec.n_trials, "evaluations": len(found.trials),
                   "objectives": list(found.study.metric_names or cfg.objectives),
                   "chosen": [t.number for t in chosen],
                   **mean_std([t.values[0] for t in found.trials])}
        ctx.run.log("search", chosen=summary["chosen"], seconds=found.seconds)
        picks = [(f"trial{t.number}", ctx.space.validate(t.user_attrs["arch"]), t.number)
                 for t in chosen]
        return summary, picks

    def one_shot(self, ctx: SearchContext, name: str) -> tuple[dict[str, Any], list[Any]]:
        """The supernet search; its derived architecture is kept and never searched again."""
        from nas.builder import build_supernet
        from nas.seeding import seed_stage

        done = ctx.run.load_json("derived_arch.json")
        if done is not None:
            arch = ctx.space.validate(done["choices"])
            ctx.stage(3, "search already finished, derived %s", dict(arch))
            return {"searcher": name, "derived": dict(arch)}, [("searched", arch, None)]
        s = ctx.cfg.one_shot
        supernet = build_supernet(ctx.space)
        ctx.init_model(supernet)
        trainer = supernet_trainer(ctx, supernet, s)
        seed = seed_stage(ctx.seed, "search")
        resolved = ctx.cfg.resolve_searcher(name)
        searcher = resolved.build(**one_shot_options(resolved.cls, seed, ctx.cfg, ctx.space))
        ctx.stage(3, "%s search over %s, %d epoch(s) × %d steps", name, ctx.space.name,
                  s.epochs, trainer.steps_per_epoch)
        with ctx.timed("search"):
            candidate = searcher.search(ctx.space, trainer)
        arch = candidate.arch
        ctx.run.save_json("derived_arch.json", {**arch.to_dict(), "id": arch.id,
                                                "space_config": ctx.space_kwargs,
                                                "params": candidate.params})
        ctx.run.log("derived", arch=dict(arch), id=arch.id, seconds=ctx.seconds["search"])
        ctx.run.remove_checkpoint("search")
        return {"searcher": name, "derived": dict(arch), **candidate.params}, [
            ("searched", arch, None)]

    # -- stages 4 and 5 --------------------------------------------------------------
    def final(self, ctx: SearchContext, chosen: list[tuple[str, Any, int | None]]
              ) -> list[dict[str, Any]]:
        """Each chosen architecture retrained on the whole training subset (or what
        ``final.train_examples`` says, with the ``transfer:`` rows) with ``final.seeds``
        seeds, scored on dev and the report split, and exported. With ``final.chain``
        they are retrained slowest first, each distilled from the one before (teacher
        assistants); the rows stay in the chosen order."""
        from nas.teacher import metric_score

        cfg, rows = ctx.cfg, {}
        first = chosen[0][0] if chosen else None
        order = self.chain_order(ctx, chosen) if cfg.final.chain else chosen
        previous: tuple[str, Any] | None = None  # the last point retrained (chain)
        for tag, arch, trial in order:
            done = ctx.run.load_json(f"final/{tag}/result.json")
            if done is not None and (ctx.run.path / "final" / tag / "export").is_dir():
                rows[tag] = done
                previous = (tag, arch)
                continue
            ctx.stage(4, "final retrain of %s (%s), %d seed(s)%s", tag, arch.id,
                      cfg.final.seeds, f", distilled from {previous[0]}"
                      if cfg.final.chain and previous else "")
            seeds = []
            final_name, final_settings = self.final_evaluator(ctx)
            data = ctx.final_data()
            for s in range(cfg.final.seeds):
                assistant = None if previous is None or not cfg.final.chain else ctx.assistant(
                    previous[0], previous[1], self.final_weights(ctx, previous, s), data)
                evaluator = ctx.evaluator(
                    final_name, final_settings, data=data, val_batches=None,
                    test=True, workdir=ctx.run.path / "final" / tag / f"seed{s}",
                    seed=cfg.seed + s, stage=f"final:{s}", assistant=assistant)
                folders = (["export"] if tag == first else []) + [f"final/{tag}/export"]
                chained = ({"distilled_from": "teacher" if assistant is None
                            else assistant.tag} if cfg.final.chain else {})
                seeds.append(ctx.finish(
                    tag, ctx.space, arch, evaluator=evaluator, stage=5,
                    what=f"the final retrain of {tag}",
                    extra={"seed": cfg.seed + s, **chained},
                    exports={f: self.export_format for f in folders} if s == 0 else {}))
            split = ctx.report_split
            row = {"tag": tag, "trial": trial, "arch": dict(arch), "arch_id": arch.id,
                   "seeds": seeds, "split": split,
                   **{f"{split}_{k}": v for k, v in mean_std(
                       [metric_score(r[split], ctx.metric) for r in seeds]).items()}}
            ctx.run.save_json(f"final/{tag}/result.json", row)
            ctx.run.log("final", tag=tag, arch_id=arch.id, **{
                k: v for k, v in row.items() if k.startswith(split)})
            rows[tag] = row
            previous = (tag, arch)
        return [rows[tag] for tag, _, _ in chosen]

    def chain_order(self, ctx: SearchContext, chosen: list[tuple[str, Any, int | None]]
                    ) -> list[tuple[str, Any, int | None]]:
        """``final.chain``'s order: the chosen points from the slowest to the fastest by
        the study's ``latency_ms`` (each trial's recorded objective value, on the scale
        the search used: predicted or measured); ties and trial-less points keep their
        chosen order."""
        def latency(pick: tuple[str, Any, int | None]) -> float:
            if pick[2] is None:
                return math.inf
            record = ctx.run.load_json(f"trials/{pick[2]}/result.json") or {}
            names = [o["name"] for o in record.get("objectives", [])]
            values = (record.get("result") or {}).get("values") or []
            return float(values[names.index("latency_ms")]) if "latency_ms" in names \
                and len(values) == len(names) else math.inf

        return sorted(chosen, key=latency, reverse=True)

    def final_weights(self, ctx: SearchContext, point: tuple[str, Any], seed: int) -> Path:
        """Where the final retrain of ``point`` (tag, architecture) with seed index
        ``seed`` wrote its weights (the evaluator's ``weights_path`` in its workdir); a
        missing file is refused in one line naming the point."""
        from evaluators.training import WEIGHTS_FILE

        tag, arch = point
        path = ctx.run.path / "final" / tag / f"seed{seed}" / arch.id / WEIGHTS_FILE
        if not path.is_file():
            raise NasError(f"final.chain: {path} is missing, the weights of the teacher "
                           f"assistant {tag} (seed {seed}); delete {path.parent.parent.parent} "
                           "and resume, and it is retrained")
        return path

    def report_sections(self, run: RunDir, metrics: dict[str, Any]) -> tuple[list[str],
                                                                             list[Path]]:
        from searchers.report import study_sections

        final = metrics.get("final") or []
        split = metrics.get("evaluation", {}).get("split", "dev")
        timed = (metrics.get("speedup") or {}).get("final") or {}
        lines = ["", "## Final retrains", "",
                 f"| model | trial | arch | seeds | {split} mean ± sd (%) | faster (batch 1) |",
                 "|---|---|---|---|---|---|"]
        for row in final:
            lines.append(f"| {row['tag']} | {row['trial'] if row['trial'] is not None else '-'}"
                         f" | {row['arch_id']} | {len(row['seeds'])} | "
                         f"{100 * row[f'{split}_mean']:.2f} ± {100 * row[f'{split}_std']:.2f} | "
                         f"{speedup_cell(timed.get(row['tag']))} |")
        if not (run.path / "study.json").is_file():
            return (lines if final else []) + one_shot_lines(metrics.get("search") or {}), []
        chosen = [r["trial"] for r in final if r.get("trial") is not None]
        more, pictures = study_sections(run.path, report_reference(metrics), chosen=chosen,
                                         into=metrics)
        return lines + more, pictures


def speedup_cell(timed: Mapping[str, Any] | None) -> str:
    """A final point's paired batch-1 speed-up over the teacher (:mod:`nas.measure`): in
    PyTorch fp32, or, for an export that ships an ONNX graph (:mod:`nas.shipped`), against
    the teacher in the same runtime and against the teacher in PyTorch fp32."""
    if not timed or "batch1" not in timed:
        return "-"
    same = f"{timed['batch1']['speedup']:.1f}× ({timed['runtime']})"
    fp32 = (timed.get("vs_torch_fp32") or {}).get("batch1")
    return same if fp32 is None else f"{same}; {fp32['speedup']:.1f}× vs torch-fp32 teacher"


def latency_scale(ctx: SearchContext, objectives: Sequence[str]) -> dict[str, Any]:
    """What the report's Pareto plot needs to draw the teacher on the trials' latency
    scale: ``latency_scale`` (``predicted`` by the latency model, or ``measured`` by the
    evaluator), its runtime (``latency_runtime``: ``torch``, ``onnx``, ``onnx-int8``) and
    the teacher's batch-1 latency on it (``teacher_latency_ms``); nothing when latency is
    not an objective."""
    if "latency_ms" not in objectives:
        return {}
    scale = "predicted" if ctx.study_latency_fn() is not None else "measured"
    return {"latency_scale": scale, "latency_runtime": ctx.cfg.latency_settings.runtime,
            "teacher_latency_ms": ctx.teacher_latency_ms()}


def one_shot_lines(search: Mapping[str, Any], undecided: float = 0.05) -> list[str]:
    """The one-shot search's derived choices with their final probabilities, and a warning
    where a choice's distribution stayed within ``undecided`` of uniform: its argmax is then
    close to a random pick, not a decision (too few architecture steps)."""
    probabilities = search.get("probabilities") or {}
    derived = search.get("derived") or {}
    title = ["", f"## One-shot search: {search.get('searcher', '?')}", ""]
    if search.get("candidates"):
        return title + _candidate_lines(search["candidates"])
    if not probabilities:
        return []
    lines = [*title, "| choice | derived | its probability | uniform |", "|---|---|---|---|"]
    flat = []
    for name, probs in probabilities.items():
        top, uniform = max(probs), 1.0 / len(probs)
        lines.append(f"| {name} | {derived.get(name, '-')} | {top:.3f} | {uniform:.3f} |")
        if top - uniform < undecided:
            flat.append(name)
    if flat:
        lines += ["", f"Warning: {len(flat)} of {len(probabilities)} choices "
                      f"({', '.join(flat)}) ended within {undecided} of uniform: their derived "
                      "values are close to random picks; raise `one_shot.epochs` or "
                      "`one_shot.arch_lr`."]
    return lines


def _candidate_lines(candidates: list[Mapping[str, Any]], shown: int = 10) -> list[str]:
    """The sampled-supernet ranking: candidates by inherited-weight score (ties in draw
    order, the order the search breaks them in), and how many tie with the chosen one."""
    ranked = sorted(enumerate(candidates), key=lambda ic: (-ic[1]["value"], ic[0]))
    lines = ["| rank | arch | params | inherited score |", "|---|---|---|---|"]
    lines += [f"| {r} | {c['arch_id']} | {c['params']:,} | {c['value']:.4f} |"
              for r, (_, c) in enumerate(ranked[:shown], 1)]
    ties = sum(c["value"] == ranked[0][1]["value"] for _, c in ranked)
    if ties > 1:
        lines += ["", f"Warning: {ties} of {len(candidates)} candidates tie at the best "
                      "inherited score; the first drawn was chosen. Score on more held-out "
                      "examples (`data.val_fraction`) to separate them."]
    return lines


__all__ = ["Search", "one_shot_lines"]
