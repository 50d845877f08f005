"""Every experiment YAML parses into its typed configuration (litgpt's config-hub test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nas.config import ConfigError
from nas.errors import NasError
from recipes.adabert import load_config

EXPERIMENTS = sorted((Path(__file__).resolve().parents[1] / "experiments").glob("adabert_*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_experiment_parses(path):
    config = load_config(path)
    assert config.name == path.stem and config.task in ("sst2", "mrpc")
    assert 0 <= config.search.gamma <= 1 and config.search.beta >= 0


def test_config_errors_name_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: adabert\nname: x\ntask: sst2\nsearch: {epochs: three}\n")
    with pytest.raises(ConfigError, match=r"search\.epochs: expected int, got 'three'"):
        load_config(bad)
    bad.write_text("method: adabert\nname: x\ntask: sst2\nserch: {}\n")
    with pytest.raises(ConfigError, match="unknown key 'serch'"):
        load_config(bad)
    bad.write_text("method: adabert\nname: x\ntask: sst2\nsearch: {arch_warmup: 1.5}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml\.search: arch_warmup must be in \[0, 1\), "
                                          r"got 1\.5"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_method_is_required_and_named(tmp_path):
    from nas.methods import load_experiment

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntask: sst2\n")
    with pytest.raises(ConfigError, match=r"missing key 'method' \(one of: .*adabert"):
        load_experiment(bad)
    bad.write_text("method: adabort\nname: x\ntask: sst2\n")
    with pytest.raises(NasError, match=r"unknown method 'adabort'; did you mean 'adabert'"):
        load_experiment(bad)
    bad.write_text("method: adabert\ntask: sst2\n")
    with pytest.raises(ConfigError, match=r"missing key 'name'"):
        load_experiment(bad)
    bad.write_text("method: adabert\nname: x\ntask: sst2\nsearch: {lr: .nan}\n")
    with pytest.raises(ConfigError, match=r"search\.lr: expected a finite number"):
        load_experiment(bad)


@pytest.mark.parametrize("path", sorted(
    (Path(__file__).resolve().parents[1] / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_every_method_experiment_loads_through_the_registry(path):
    import yaml

    from nas.methods import load_experiment

    if "method" not in yaml.safe_load(path.read_text()):
        pytest.skip("not a method experiment (e.g. a teacher fine-tune file)")
    method, config = load_experiment(path)
    assert method.name and config.name == path.stem
