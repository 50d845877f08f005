"""Configuration values that used to give a silent wrong answer or a bare error at run
time are refused while the file loads (``nas run FILE --dry-run`` too): one line naming
the key and what it allows, exit 2.

Each case edits a shipped experiment (or writes the YAML text itself, for what only the
text can show: a key given twice, aliases) and runs ``nas run --dry-run`` in-process; a
configuration that loads would print its plan and exit 0, so each case can fail.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from nas.cli import main

ROOT = Path(__file__).resolve().parents[1]
ADABERT = ROOT / "experiments" / "adabert_smoke.yaml"
COMPRESS = ROOT / "experiments" / "compress_smoke.yaml"
SEARCH = ROOT / "examples" / "custom_search.yaml"
MIXEDVOCAB = ROOT / "experiments" / "mixedvocab_smoke.yaml"


def _set(data: dict, dotted: str, value: object) -> None:
    *parents, key = dotted.split(".")
    for p in parents:
        data = data.setdefault(p, {})
    data[key] = value


def edited(source: Path, **changes: object) -> Callable[[Path], Path]:
    """``source`` with each ``a__b=value`` set at ``a.b`` (a search file's plug-in path
    made absolute, so the copy finds it)."""
    def write(tmp: Path) -> Path:
        data = yaml.safe_load(source.read_text())
        if "plugins" in data:
            data["plugins"] = [str(source.parent / p) for p in data["plugins"]]
        for key, value in changes.items():
            _set(data, key.replace("__", "."), value)
        path = tmp / "bad.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    return write


def text(body: str) -> Callable[[Path], Path]:
    """The smoke experiment's text, without its ``multi_trial`` line, with ``body``
    appended (raw YAML)."""
    def write(tmp: Path) -> Path:
        path = tmp / "bad.yaml"
        kept = [line for line in ADABERT.read_text().splitlines()
                if not line.startswith("multi_trial:")]
        path.write_text("\n".join(kept) + "\n" + body)
        return path

    return write


def _bomb() -> str:
    """A "billion laughs" under multi_trial.samplers: 7 levels of 10 aliases (10**7
    values) in a few hundred bytes."""
    lines = ["multi_trial:", "  samplers:", "    l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"    l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


@dataclass
class Case:
    write: Callable[[Path], Path]
    phrase: str  # a regular expression the one stderr line must contain
    extra: tuple[str, ...] = ()  # more command-line arguments


CASES = {
    # caps of 0 meant "all rows", or crashed after the search / divided by zero
    "data-max-train-0": Case(edited(ADABERT, data__max_train_examples=0),
                             r"data: max_train_examples must be null \(all rows\) or an "
                             r"integer >= 2, got 0"),
    "data-max-dev-0": Case(edited(ADABERT, data__max_dev_examples=0),
                           r"data: max_dev_examples must be null \(all rows\) or an integer "
                           r">= 1, got 0"),
    "data-max-report-0": Case(edited(ADABERT, data__max_report_examples=0),
                              r"data: max_report_examples must be null \(all rows\) or an "
                              r"integer >= 1, got 0"),
    "teacher-max-train-0": Case(edited(ADABERT, teacher_finetune__max_train_examples=0),
                                r"teacher_finetune: .*max_train_examples must be null \(all "
                                r"rows\) or an integer >= 1, got 0"),
    "teacher-max-dev-0": Case(edited(ADABERT, teacher_finetune__max_dev_examples=0),
                              r"teacher_finetune: .*max_dev_examples must be null"),
    "mixedvocab-teacher-task-max-train-0": Case(
        edited(MIXEDVOCAB, teacher_task__max_train_examples=0),
        r"teacher_task: max_train_examples must be null \(all rows\) or an integer >= 2"),
    # evaluator settings: a typo was dropped unseen; epochs/steps 0 failed at the first trial
    "evaluator-typo": Case(edited(SEARCH, evaluator__settings__epoch=3),
                           r"evaluator\.settings: evaluator 'distilled-retrain' has no "
                           r"setting 'epoch'; its settings: alpha, batch_size, .*epochs"),
    "evaluator-typo-inherited-kd": Case(edited(COMPRESS, evaluator__settings__hidden_wieght=1),
                                        r"evaluator 'inherited-kd' has no setting "
                                        r"'hidden_wieght'; its settings: .*hidden_weight"),
    "evaluator-epochs-0": Case(edited(SEARCH, evaluator__settings__epochs=0),
                               r"evaluator\.settings \('distilled-retrain'\): epochs must be an "
                               r"integer >= 1, got 0"),
    "evaluator-epochs-negative": Case(edited(SEARCH, evaluator__settings__epochs=-2),
                                      r"evaluator\.settings .*epochs must be an integer >= 1"),
    "evaluator-max-steps-0": Case(edited(COMPRESS, evaluator__settings__max_steps=0),
                                  r"evaluator\.settings \('inherited-kd'\): max_steps must be "
                                  r"None or >= 1, got 0"),
    "evaluator-costs-typo": Case(edited(SEARCH, evaluator={"name": "costs",
                                                           "settings": {"objective": ["params"]}}),
                                 r"evaluator\.settings \('costs'\): unknown key 'objective'; "
                                 r"known keys: objectives"),
    # final.ratios: speed-ups over the teacher, as knapsack.ratios
    "final-ratio-below-1": Case(edited(COMPRESS, final__ratios=[0.5]),
                                r"final: ratios must be speed-ups over the teacher, numbers > 1"),
    "final-ratio-1": Case(edited(COMPRESS, final__ratios=[1]), r"final: ratios must be"),
    "final-ratio-true": Case(edited(COMPRESS, final__ratios=[True]),
                             r"final: ratios must be .*got \[True\]"),
    "knapsack-ratio-true": Case(edited(COMPRESS, knapsack__ratios=[True]),
                                r"knapsack: ratios must be ratios >= 1"),
    # seeds: what numpy's legacy seeding and the samplers take
    "seed-negative": Case(edited(ADABERT, seed=-1),
                          r"seed must be an integer in \[0, 4294967295\], got -1"),
    "seed-2-32": Case(edited(ADABERT, seed=2**32),
                      r"seed must be an integer in \[0, 4294967295\], got 4294967296"),
    "teacher-seed-negative": Case(edited(ADABERT, teacher_finetune__seed=-1),
                                  r"teacher_finetune: .*seed must be an integer in \[0, "),
    # sizes of a space, checked by building it while loading
    "adabert-space-hidden-0": Case(edited(ADABERT, space__hidden=0),
                                   r"space: space 'adabert': hidden must be a positive integer, "
                                   r"got 0"),
    "search-space-hidden-negative": Case(edited(SEARCH, space_config__hidden=-4),
                                         r"space_config: space 'tiny-cell': hidden must be a "
                                         r"positive integer, got -4"),
    # the YAML itself
    "yaml-duplicate-key": Case(text("seed: 3\n"),
                               r"bad\.yaml: key 'seed' given twice in one mapping \(again at "
                               r"line \d+\); keep one"),
    "yaml-duplicate-nested-key": Case(text("extra:\n  a: 1\n  a: 2\n"),
                                      r"key 'a' given twice .*line \d+"),
    "yaml-alias-bomb": Case(text(_bomb()),
                            r"bad\.yaml: the value at line \d+ expands through its aliases to "
                            r"more than 100,000 values"),
    "yaml-alias-recursive": Case(text("extra: &loop [*loop]\n"),
                                 r"contains an alias of itself"),
    "set-duplicate-key": Case(edited(ADABERT), r"--set search: key 'epochs' given twice",
                              ("--set", "search={epochs: 1, epochs: 2}")),
}


def _run(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    return int(code or 0), capsys.readouterr().err


@pytest.mark.parametrize("name", list(CASES))
def test_bad_value_is_refused_in_one_line(name, tmp_path, capsys):
    case = CASES[name]
    path = case.write(tmp_path)
    code, err = _run(["run", str(path), "--dry-run", *case.extra], capsys)
    lines = err.splitlines()
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert re.search(case.phrase, lines[0]), lines[0]


def test_null_caps_still_mean_every_row(tmp_path):
    """``null`` (or leaving the key out) is still how a file says "all rows"."""
    from nas.methods import load_experiment

    path = edited(ADABERT, data__max_train_examples=None, data__max_report_examples=None,
                  teacher_finetune__max_train_examples=None)(tmp_path)
    _, config = load_experiment(path)
    assert config.data.max_train_examples is None
    assert config.data.max_report_examples is None
    assert config.teacher_finetune.max_train_examples is None


def test_the_largest_seed_loads_and_a_merge_key_is_no_duplicate(tmp_path):
    """The range's top loads; YAML's own override (``<<`` then a key) is not a key twice."""
    from nas.config import parse_yaml
    from nas.methods import load_experiment

    _, config = load_experiment(edited(ADABERT, seed=2**32 - 1)(tmp_path))
    assert config.seed == 2**32 - 1
    data = parse_yaml("base: &b {epochs: 1, batch_size: 32}\nretrain: {<<: *b, epochs: 2}\n")
    assert data["retrain"] == {"epochs": 2, "batch_size": 32}


def test_an_evaluator_left_without_settings_gets_none(tmp_path):
    """Settings left out are the training default only for a training evaluator: another
    evaluator (``costs``) loads with none rather than refusing ``epochs``."""
    from nas.methods import load_experiment

    _, config = load_experiment(edited(SEARCH, evaluator={"name": "costs"})(tmp_path))
    assert config.evaluator.settings == {}
    _, config = load_experiment(edited(SEARCH, evaluator={"name": "distilled-retrain"})(
        tmp_path))
    assert config.evaluator.settings == {"epochs": 1, "lr": 1e-3}


def test_a_plugin_evaluator_settings_are_checked_while_loading(tmp_path, capsys, monkeypatch):
    """A plug-in evaluator registered with a settings dataclass: an unknown key is refused
    naming it and the known keys; one without settings refuses any."""
    from dataclasses import dataclass as dc

    from evaluators.base import EVALUATORS, Evaluator

    @dc(frozen=True)
    class ScaleSettings:
        scale: float = 1.0

    class Scaled(Evaluator):
        def __init__(self, space):
            self.space = space

        @classmethod
        def settings_type(cls) -> type:
            return ScaleSettings

        @classmethod
        def from_settings(cls, settings, data, space):
            return cls(space)

        def evaluate(self, arch, trial=None):
            raise AssertionError("not scored in this test")

    class Plain(Scaled):
        @classmethod
        def settings_type(cls) -> None:  # type: ignore[override]
            return None

    for name, cls in (("test-scaled", Scaled), ("test-plain", Plain)):
        monkeypatch.setitem(EVALUATORS._items, name, cls)
        monkeypatch.setitem(EVALUATORS._origins, name, "this test")
    bad = edited(SEARCH, evaluator={"name": "test-scaled", "settings": {"scael": 2.0}})(tmp_path)
    code, err = _run(["run", str(bad), "--dry-run"], capsys)
    assert code == 2
    assert re.search(r"evaluator\.settings \('test-scaled'\): unknown key 'scael'; known keys: "
                     r"scale", err), err
    bad = edited(SEARCH, evaluator={"name": "test-plain", "settings": {"scale": 2.0}})(tmp_path)
    code, err = _run(["run", str(bad), "--dry-run"], capsys)
    assert code == 2
    assert "unknown key 'scale'; evaluator 'test-plain' takes no settings" in err, err


@pytest.mark.parametrize("argv", [["spaces", "sample", "adabert", "--seed", str(2**32)],
                                  ["spaces", "sample", "adabert", "--seed", "-1"]])
def test_seed_flag_outside_the_range_is_refused(argv, capsys):
    code, err = _run(argv, capsys)
    assert code == 2
    assert re.search(r"--seed: expected a seed, an integer in \[0, 4294967295\]", err), err
