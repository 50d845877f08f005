"""Every experiment YAML parses into its method's typed configuration through the registry
(litgpt's config-hub test): the one parsing test for the shipped files. The errors of a
bad file are tested once each in tests/test_bad_inputs.py (the one-line table) and
tests/test_own_data.py (``--set`` gets the file's checks)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nas.config import ConfigError
from nas.methods import load_experiment

EXPERIMENTS = sorted((Path(__file__).resolve().parents[1] / "experiments").glob("*.yaml"))


def test_a_range_error_names_the_file_and_key_and_a_missing_file_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: adabert\nname: x\ntask: sst2\nsearch: {arch_warmup: 1.5}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml\.search: arch_warmup must be in \[0, 1\), "
                                          r"got 1\.5"):
        load_experiment(bad)
    with pytest.raises(ConfigError, match="missing.yaml' does not exist"):
        load_experiment(tmp_path / "missing.yaml")


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_every_method_experiment_loads_through_the_registry(path):
    if "method" not in yaml.safe_load(path.read_text()):
        pytest.skip("not a method experiment (e.g. a teacher fine-tune file)")
    method, config = load_experiment(path)
    # a link (search_smoke.yaml -> examples/custom_search.yaml) keeps its target's name
    assert isinstance(config, method.config_class) and config.name == path.resolve().stem


def test_the_quickstart_names_every_cap_in_its_header_and_the_readme():
    """The README's first command runs experiments/quickstart.yaml: every cap on its
    budget (rows of the teacher's fine-tune, of the distillation, of dev...) is stated in
    the file's header and in the README, as the numbers the file sets."""
    path = EXPERIMENTS[0].parent / "quickstart.yaml"
    text = path.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    readme = (path.parents[1] / "README.md").read_text()
    config = yaml.safe_load(text)
    caps = [config["teacher_finetune"]["max_train_examples"],
            config["teacher_finetune"]["max_dev_examples"],
            config["data"]["max_train_examples"], config["data"]["max_dev_examples"],
            config["final"]["train_examples"]]
    for cap in caps:
        assert f"{cap:,}" in header, cap
        assert f"{cap:,}" in readme, cap
    layers = config["searcher"]["settings"]["layers"]
    assert len(layers) == 1 and f"first {layers[0]} " in header and f"first {layers[0]} " in readme
    assert "nas run experiments/quickstart.yaml --run-dir runs/quickstart" in readme
