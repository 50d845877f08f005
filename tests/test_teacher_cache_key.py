"""The fine-tuning cache key does not depend on how a number was written (int or float)."""

from __future__ import annotations

import pytest

from nas.errors import NasError
from nas.teacher import FinetuneConfig, finetune_key


def test_yaml_int_and_cli_float_share_a_cache_key():
    from_yaml = FinetuneConfig(epochs=1, max_seq_len=64, lr=1)
    from_cli = FinetuneConfig(epochs=1.0, max_seq_len=64, lr=1.0)
    assert finetune_key("sst2", "t", ["d"], from_yaml) == finetune_key("sst2", "t", ["d"],
                                                                      from_cli)
    assert finetune_key("sst2", "t", ["d"], from_yaml) != finetune_key(
        "sst2", "t", ["d"], FinetuneConfig(epochs=2, max_seq_len=64, lr=1))


def test_wrong_types_are_named():
    with pytest.raises(NasError, match="epochs must be a number, got 'two'"):
        FinetuneConfig(epochs="two")  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(NasError, match="batch_size must be an integer, got 32.5"):
        FinetuneConfig(batch_size=32.5)  # type: ignore[arg-type]  # the wrong type on purpose
