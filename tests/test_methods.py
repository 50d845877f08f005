"""The method registry: `nas run` dispatches through it, and every registered method
fulfils the contract (a typed config, searchers that exist, a smoke experiment)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from nas.cli import main
from nas.methods import METHODS, Method, RunOptions, load_experiment
from nas.rundir import RunDir

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@dataclasses.dataclass
class EchoConfig:
    name: str
    task: str
    repeat: int = 1


class Echo(Method):
    """A method that only writes its config: proves that `nas run` knows no method by
    name."""

    name = "echo"
    config_class = EchoConfig
    searchers = ("random",)

    def run(self, config, options):
        run = RunDir(options.run_dir, {"method": self.name, **dataclasses.asdict(config)},
                     resume=options.resume)
        metrics = {"repeat": config.repeat, "searcher": options.searcher}
        run.save_json("metrics.json", metrics)
        return metrics


@pytest.fixture
def echo(monkeypatch, tmp_path):
    monkeypatch.setitem(METHODS._items, "echo", Echo)  # a plug-in, for this test only
    path = tmp_path / "echo.yaml"
    path.write_text("method: echo\nname: e\ntask: sst2\nrepeat: 3\n")
    return path


def test_nas_run_dispatches_through_the_registry(echo, tmp_path, capsys):
    assert main(["run", str(echo), "--run-dir", str(tmp_path / "r"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"repeat": 3, "searcher": "random"}
    assert main(["search", str(echo), "--run-dir", str(tmp_path / "s")]) == 0  # the alias
    assert main(["run", str(echo), "--searcher", "differentiable"]) == 2
    assert "method 'echo' cannot use --searcher differentiable" in capsys.readouterr().err


def test_unknown_method_is_one_line_listing_the_known(tmp_path, capsys):
    path = tmp_path / "x.yaml"
    path.write_text("method: tinybort\nname: x\ntask: sst2\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown method 'tinybort'" in err
    assert "adabert" in err


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_fulfils_the_contract(name):
    from searchers.base import SEARCHERS

    method = METHODS.get(name)()
    assert isinstance(method, Method) and method.name == name
    fields = {f.name for f in dataclasses.fields(method.config_class)}
    assert {"name", "task"} <= fields
    # a method that does not search (a fixed design distilled by its recipe) lists none
    assert all(s in SEARCHERS for s in method.searchers)
    # no --searcher: the method's default, one it accepts, or None (MobileBERT searches its
    # grid only when asked)
    default = method.default_searcher()
    assert default is None or default in method.searchers
    assert method.check_searcher(None) == default
    smoke = EXPERIMENTS / f"{name}_smoke.yaml"
    assert smoke.is_file(), f"method {name} needs experiments/{name}_smoke.yaml"
    loaded, config = load_experiment(smoke)
    assert loaded.name == name and isinstance(config, method.config_class)


def test_run_options_defaults():
    options = RunOptions(run_dir=Path("r"))
    assert options.searcher is None and options.progress
    assert options.study is None and not options.break_lock
