"""Every experiment YAML parses into its typed configuration (litgpt's config-hub test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.adabert import load_config
from nas.config import ConfigError

EXPERIMENTS = sorted((Path(__file__).resolve().parents[1] / "experiments").glob("adabert_*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_experiment_parses(path):
    config = load_config(path)
    assert config.name == path.stem and config.task in ("sst2", "mrpc")
    assert 0 <= config.search.gamma <= 1 and config.search.beta >= 0


def test_config_errors_name_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntask: sst2\nsearch: {epochs: three}\n")
    with pytest.raises(ConfigError, match=r"search\.epochs: expected int, got 'three'"):
        load_config(bad)
    bad.write_text("name: x\ntask: sst2\nserch: {}\n")
    with pytest.raises(ConfigError, match="unknown key 'serch'"):
        load_config(bad)
    bad.write_text("name: x\ntask: sst2\nsearch: {arch_warmup: 1.5}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml\.search: arch_warmup must be in \[0, 1\), "
                                          r"got 1\.5"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
