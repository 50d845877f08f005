"""AdaBERT probes (docs/reference.md#adabert) and the memory-mapped teacher-output cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import nas.teacher
from nas.data import iter_batches, load_task
from nas.distill.cache import TeacherOutputCache, cached_probe_logits
from nas.distill.losses import probe_distillation_loss
from nas.distill.probes import ProbeSet, pool_hidden_states, probe_accuracy, train_probes
from nas.errors import NasError
from nas.tokenization import load_tokenizer


def block_teacher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any attempt to load a teacher model fail loudly."""

    def blocked(*args: object, **kwargs: object) -> None:
        raise AssertionError("the teacher was loaded although its outputs are cached")

    monkeypatch.setattr(nas.teacher, "load_teacher", blocked)
    monkeypatch.setattr(nas.teacher, "_from_pretrained", blocked)


def test_pool_hidden_states_by_hand() -> None:
    h = torch.tensor([[[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]]])  # (P=1, B=1, L=3, D=2)
    mask = torch.tensor([[1, 1, 0]])  # the third token is padding
    assert pool_hidden_states(h, mask, "cls").tolist() == [[[1.0, 2.0]]]
    assert pool_hidden_states(h, mask, "mean").tolist() == [[[2.0, 3.0]]]
    with pytest.raises(NasError, match="pooling"):
        pool_hidden_states(h, mask, "max")


def test_train_probes_separates_informative_layers(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=300)
    noise = rng.normal(size=(300, 4))
    informative = noise + 4.0 * np.eye(3, 4)[y]  # class shifts one coordinate
    feats = np.stack([noise, informative]).astype(np.float16)  # (P=2, N, D)
    probes = train_probes(feats, y, num_classes=3)
    logits = probes.logits(feats)
    assert logits.shape == (2, 300, 3) and logits.dtype == np.float32
    acc = probe_accuracy(logits, y)
    assert acc[1] > 0.95 and acc[0] < 0.6  # only layer 2 carries the label
    probes.save(tmp_path / "p.safetensors")
    again = ProbeSet.load(tmp_path / "p.safetensors")
    np.testing.assert_allclose(again.logits(feats), logits, rtol=1e-6)
    # deterministic: the same seed gives the same probes
    np.testing.assert_allclose(train_probes(feats, y, 3).logits(feats), logits, rtol=1e-5)


def test_cache_stores_logits_and_features_memory_mapped(tiny_teacher: Path,
                                                        tmp_path: Path) -> None:
    dev = load_task("sst2", "dev").head(20)
    cache = TeacherOutputCache(str(tiny_teacher), dev, max_seq_len=32, cache_dir=tmp_path,
                               batch_size=8)
    logits = cache.logits()
    feats = cache.features()
    assert isinstance(logits, np.memmap) and logits.shape == (20, 2)
    assert feats.shape == (3, 20, 32) and feats.dtype == np.float16  # embedding + 2 layers
    # sorted-by-length batching must put every row back in its place: compare with an
    # unsorted forward pass of the first examples
    model = nas.teacher.load_teacher(str(tiny_teacher), num_labels=2)
    batch = next(iter_batches(dev, load_tokenizer(tiny_teacher), 4, 32))
    with torch.no_grad():
        ref = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"]).logits
    np.testing.assert_allclose(logits[:4], ref.numpy(), atol=1e-4)


def test_search_loop_reads_cached_probe_logits_without_teacher(
    tiny_teacher: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train = load_task("sst2", "train").head(64)
    dev = load_task("sst2", "dev").head(24)
    first = np.array(cached_probe_logits(str(tiny_teacher), train, dev, max_seq_len=32,
                                         cache_dir=tmp_path))
    assert first.shape == (3, 24, 2)
    first_train = np.array(cached_probe_logits(str(tiny_teacher), train, max_seq_len=32,
                                               cache_dir=tmp_path))
    assert first_train.shape == (3, 64, 2)

    # From here on any teacher load raises: the search loop must live off the cache.
    block_teacher(monkeypatch)
    probe_logits = cached_probe_logits(str(tiny_teacher), train, max_seq_len=32,
                                       cache_dir=tmp_path)
    assert isinstance(probe_logits, np.memmap)
    np.testing.assert_array_equal(probe_logits, first_train)
    np.testing.assert_array_equal(
        cached_probe_logits(str(tiny_teacher), train, dev, max_seq_len=32, cache_dir=tmp_path),
        first)

    # a toy "student": K = 2 layer classifiers over bag-of-ids features
    tok = load_tokenizer(tiny_teacher)
    torch.manual_seed(0)
    emb = torch.nn.EmbeddingBag(tok.vocab_size, 8)
    heads = torch.nn.ModuleList(torch.nn.Linear(8, 2) for _ in range(2))
    opt = torch.optim.SGD([*emb.parameters(), *heads.parameters()], lr=0.1)
    losses = []
    for batch in iter_batches(train, tok, batch_size=16, max_length=32, shuffle=True):
        x = emb(batch["input_ids"])  # (B, 8)
        student = [h(x) for h in heads]
        target = torch.from_numpy(np.asarray(probe_logits[:, batch["index"].numpy()]))
        loss = probe_distillation_loss(student, target, batch["labels"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert len(losses) == 4 and all(np.isfinite(losses))


def test_cache_keys_differ_by_data_and_length(tiny_teacher: Path, tmp_path: Path) -> None:
    dev = load_task("sst2", "dev")
    a = TeacherOutputCache(str(tiny_teacher), dev.head(5), 32, tmp_path)
    b = TeacherOutputCache(str(tiny_teacher), dev.head(6), 32, tmp_path)
    c = TeacherOutputCache(str(tiny_teacher), dev.head(5), 64, tmp_path)
    assert len({a.path, b.path, c.path}) == 3
    with pytest.raises(NasError, match="no cached array"):
        a.load("logits")
