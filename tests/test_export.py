"""Standalone export: round trips in a fresh process with no search code, ONNX, HF, errors.

Every registered space (small test configuration, a sampled child) is exported in the
native and ONNX formats; a fresh Python process in which ``spaces``, ``searchers`` and
``evaluators`` cannot be imported loads each directory with both runtimes and must
reproduce the logits (≤ 1e-4) at a batch size and length other than the traced ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from nas.builder import build_child, build_supernet, extract_child
from nas.cost import batch_for
from nas.errors import ExportError
from nas.export import export
from nas.runtime import file_manifest, load
from nas.space import get_space, list_spaces, small_config

TOL = 1e-4
VARIANTS = [(n, {}) for n in list_spaces(tabular=False)] + [("adabert", {"pair": True})]

BLOCKED_RUNNER = textwrap.dedent("""
    import importlib.abc, json, sys
    BLOCKED = {"spaces", "searchers", "evaluators"}

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Blocker())
    import torch
    from nas.runtime import load

    diffs = {}
    for directory in sys.argv[1:]:
        batch = torch.load(directory + "/../batch.pt", weights_only=True)[directory]
        ref = torch.load(directory + "/../logits.pt", weights_only=True)[directory]
        for runtime in ("torch", "onnx"):
            got = load(directory, runtime)(batch)
            diffs[f"{directory}:{runtime}"] = float((got - ref).abs().max())
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps({"diffs": diffs, "leaked": leaked}))
""")


def _batch(space, batch_size=3, seq_len=11):
    batch = batch_for(space, batch_size, seq_len)
    for key in ("attention_mask", "attention_mask_b"):
        if key in batch:
            batch[key][1, 7:] = 0  # padding in one row
    return batch


def test_every_space_round_trips_native_and_onnx_without_search_code(tmp_path):
    batches, logits, dirs = {}, {}, []
    for name, extra in VARIANTS:
        torch.manual_seed(0)
        space = get_space(name, **{**small_config(name), **extra})
        arch = space.sample(3)
        child = build_child(space, arch).eval()
        directory = str(tmp_path / f"{name}{'-pair' if extra else ''}")
        export(space, arch, directory, fmt="onnx", model=child)
        batch = _batch(space)
        with torch.no_grad():
            logits[directory] = child(batch).logits
        batches[directory] = batch
        dirs.append(directory)
    torch.save(batches, tmp_path / "batch.pt")
    torch.save(logits, tmp_path / "logits.pt")
    # each directory's batch lives one level up, keyed by the directory
    for d in dirs:
        assert Path(d, "..", "batch.pt").resolve() == (tmp_path / "batch.pt").resolve()
    proc = subprocess.run([sys.executable, "-c", BLOCKED_RUNNER, *dirs], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["leaked"] == []
    bad = {k: v for k, v in result["diffs"].items() if not v <= TOL}
    assert not bad, bad
    assert len(result["diffs"]) == 2 * len(VARIANTS)


def test_export_directory_contents(tmp_path):
    space = get_space("tinybert", num_labels=2)
    out = export(space, None, tmp_path / "tb", labels=["negative", "positive"], random_init=True)
    config = json.loads((out / "config.json").read_text())
    assert config["space"] == {"name": "tinybert", "fixed": True, "config": space.config}
    assert config["architecture"]["choices"] == {}
    assert config["labels"] == ["negative", "positive"]
    assert config["hyperparameters"]["hidden_size"] == 312
    assert config["tokenizer"]["max_length"] == 128
    assert {"model.safetensors", "config.json", "vocab.txt", "tokenizer.json"} <= {
        p.name for p in out.iterdir()}
    model = load(out)
    [pred] = model.predict(["an utterly charming film"])
    assert pred["label"] in ("negative", "positive")
    assert sum(pred["probabilities"].values()) == pytest.approx(1.0, abs=1e-6)
    # pairs are joined BERT-style: [CLS] a [SEP] b [SEP]
    batch = model.encode(["a"], ["b"])
    assert int(batch["token_type_ids"].sum()) == 2


def test_a_copied_export_has_the_same_files_and_replaces_only_an_export(tmp_path):
    """A run's second folder of one model in one format is a copy (nas.export.copy_export):
    the same bytes, written the way every export is (a previous export replaced,
    anything else refused in one line, no partial folder left)."""
    from nas.export import copy_export

    out = export(get_space("adabert"), None, tmp_path / "a", random_init=True,
                 labels=["neg", "pos"])
    stale = export(get_space("adabert"), None, tmp_path / "b", random_init=True,
                   labels=["x", "y"])
    assert copy_export(out, stale) == stale  # a previous export: replaced
    for path in out.iterdir():
        assert (stale / path.name).read_bytes() == path.read_bytes(), path.name
    assert sorted(p.name for p in stale.iterdir()) == sorted(p.name for p in out.iterdir())
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    with pytest.raises(ExportError, match="not an export of this tool"):
        copy_export(out, other)
    assert (other / "mine.txt").read_text() == "keep"
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_hf_format_loads_in_stock_transformers(tmp_path):
    from transformers import AutoModelForSequenceClassification

    for name, kwargs in [
        ("bert", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=48, num_labels=3)),
        ("mobilebert-tiny", dict(embedding_size=16, hidden_size=32, intra_bottleneck_size=16,
                                 num_attention_heads=4, intermediate_size=32,
                                 num_hidden_layers=2, num_labels=3)),
    ]:
        space = get_space(name, **kwargs)
        torch.manual_seed(0)
        child = build_child(space).eval()
        out = export(space, None, tmp_path / name, fmt="hf", model=child, labels=["a", "b", "c"])
        theirs = AutoModelForSequenceClassification.from_pretrained(str(out)).eval()
        assert theirs.config.id2label == {0: "a", 1: "b", 2: "c"}
        model = load(out)
        batch = model.encode(["a fine film", "dull"])
        with torch.no_grad():
            ref = child(batch).logits
            assert (theirs(**batch).logits - ref).abs().max().item() <= TOL
        assert (model(batch) - ref).abs().max().item() <= TOL
        assert model.predict(["a fine film"])[0]["label"] in ("a", "b", "c")


def test_exporting_without_weights_needs_random_init(tmp_path):
    space = get_space("adabert", **small_config("adabert"))
    with pytest.raises(ExportError, match="--random-init"):
        export(space, None, tmp_path / "x", fmt="hf")
    assert not (tmp_path / "x").exists() and list(tmp_path.iterdir()) == []
    out = export(space, None, tmp_path / "y", random_init=True)
    assert json.loads((out / "config.json").read_text())["random_init"] is True


def test_export_with_supernet_weights_slices_them(tmp_path):
    space = get_space("mobilebert-grid", **small_config("mobilebert-grid"))
    torch.manual_seed(0)
    supernet = build_supernet(space).eval()
    ckpt = tmp_path / "supernet.pt"
    torch.save({"model": supernet.state_dict(), "step": 3}, ckpt)
    arch = space.sample(5)
    out = export(space, arch, tmp_path / "child", weights=ckpt)
    batch = _batch(space)
    with torch.no_grad():
        ref = extract_child(supernet, space, arch).eval()(batch).logits
    assert (load(out)(batch) - ref).abs().max().item() <= 1e-6
    other = get_space("tinybert", **small_config("tinybert"))
    with pytest.raises(ExportError, match=r"supernet\.pt: (lacks|tensor .* does not contain)"):
        export(other, None, tmp_path / "wrong", weights=ckpt)


def test_export_takes_the_model_of_a_training_checkpoint(tmp_path):
    """A nas.checkpoint training state (model, optimizer, counters) exports its model."""
    from nas.checkpoint import save_state

    space = get_space("bert", **small_config("bert"))
    torch.manual_seed(0)
    child = build_child(space, space.default())
    batch = _batch(space)
    opt = torch.optim.AdamW(child.parameters(), lr=0.1)
    child(batch).logits.sum().backward()
    opt.step()  # trained weights, and an optimizer state with tensors of its own
    ckpt = tmp_path / "checkpoint.safetensors"
    save_state(ckpt, {"model": child.state_dict(), "optimizer": opt.state_dict(), "step": 1})
    out = export(space, None, tmp_path / "child", weights=ckpt)
    with torch.no_grad():
        ref = child.eval()(batch).logits
    assert torch.equal(load(out)(batch), ref)
    save_state(tmp_path / "search.safetensors", {"search": {"step": 1}, "epoch": 0})
    with pytest.raises(ExportError, match=r"search\.safetensors: expected a state dict of "
                                          r"tensors, .* \(it holds: search, epoch\)"):
        export(space, None, tmp_path / "other", weights=tmp_path / "search.safetensors")


def test_label_count_must_match(tmp_path):
    space = get_space("bert", **small_config("bert"))
    with pytest.raises(ExportError, match="3 label names"):
        export(space, None, tmp_path / "x", labels=["a", "b", "c"], random_init=True)


@pytest.fixture
def exported(tmp_path):
    space = get_space("mobilebert", **small_config("mobilebert"))
    return export(space, None, tmp_path / "m", random_init=True)


def test_missing_weights_are_named(exported):
    (exported / "model.safetensors").unlink()
    with pytest.raises(ExportError, match=r"model\.safetensors: missing"):
        load(exported)


def _relist(exported):
    """Rewrite the export's file list after a test edited a file on purpose, so that the
    checks behind the hash check are reached."""
    path = exported / "config.json"
    config = json.loads(path.read_text())
    config["files"] = file_manifest(exported)
    path.write_text(json.dumps(config))


def test_truncated_weights_are_named(exported):
    path = exported / "model.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ExportError, match=r"model\.safetensors: changed since the export"):
        load(exported)
    _relist(exported)
    with pytest.raises(ExportError, match=r"model\.safetensors: not a readable safetensors"):
        load(exported)


def test_missing_tokenizer_file_is_refused(tmp_path):
    out = export(get_space("tinybert", num_hidden_layers=1), None, tmp_path / "tb",
                 random_init=True)
    (out / "vocab.txt").unlink()
    with pytest.raises(ExportError, match=r"vocab\.txt: missing \(the export lists it\)"):
        load(out)


def test_export_folder_safety(tmp_path):
    space = get_space("tinybert", num_hidden_layers=1)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text('{"someone": "else"}')
    with pytest.raises(ExportError, match="not empty and not an export of this tool"):
        export(space, None, foreign, random_init=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign"]  # nothing left behind
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(ExportError, match="is an existing file"):
        export(space, None, a_file, random_init=True)
    out = export(space, None, tmp_path / "m", fmt="onnx", random_init=True)
    assert (out / "model.onnx").is_file()
    with pytest.raises(ExportError, match="pass --overwrite"):
        export(space, None, out, random_init=True)
    # native now: the old model.onnx must go
    export(space, None, out, overwrite=True, random_init=True)
    assert not (out / "model.onnx").exists()
    load(out)
    with pytest.raises(ExportError, match="model.onnx: missing"):
        load(out, "onnx")
    with pytest.raises(ExportError, match="format must be one of"):
        export(space, None, tmp_path / "bad", fmt="tflite", random_init=True)
    assert not (tmp_path / "bad").exists()


def test_unknown_op_is_named(exported):
    path = exported / "config.json"
    config = json.loads(path.read_text())
    config["graph"]["nodes"][3]["op"] = "warp_drive"
    path.write_text(json.dumps(config))
    with pytest.raises(ExportError, match=r"config\.json: bad graph: unknown op 'warp_drive'"):
        load(exported)


def test_mismatched_shapes_are_named(exported):
    from safetensors.torch import load_file, save_file

    path = exported / "model.safetensors"
    state = load_file(str(path))
    name = next(k for k in state if k.endswith("query.weight"))
    state[name] = state[name][:, :-1].contiguous()
    save_file(state, str(path))
    _relist(exported)
    with pytest.raises(ExportError, match=rf"model\.safetensors: tensor {name} has shape"):
        load(exported)


def test_missing_tensor_and_broken_config_are_named(exported):
    from safetensors.torch import load_file, save_file

    path = exported / "model.safetensors"
    state = load_file(str(path))
    state.pop(next(iter(state)))
    save_file(state, str(path))
    _relist(exported)
    with pytest.raises(ExportError, match=r"model\.safetensors: lacks 1 tensor"):
        load(exported)
    (exported / "config.json").write_text("{not json")
    with pytest.raises(ExportError, match=r"config\.json: broken JSON at line 1"):
        load(exported)
    (exported / "config.json").unlink()
    with pytest.raises(ExportError, match=r"config\.json: missing"):
        load(exported)
    with pytest.raises(ExportError, match="model.onnx: missing"):
        (exported / "config.json").write_text(json.dumps(
            {"format": "nas-export", "graph": {}, "labels": ["a"], "inputs": ["input_ids"],
             "files": file_manifest(exported)}))
        load(exported, "onnx")


def _cli(*argv: str) -> str:
    """Run one of our commands through argparse, as `nas` does, capturing stdout."""
    import contextlib
    import io

    from nas.cli import export as commands

    parser = argparse.ArgumentParser(prog="nas")
    commands.register(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert args.func(args) == 0
    return buf.getvalue()


def test_cli_export_predict_bench(tmp_path):
    out = tmp_path / "cli"
    doc = json.loads(_cli("export", "--space", "tinybert", "-c", "num_hidden_layers=1",
                          "-o", str(out), "--format", "onnx", "--labels", "neg,pos", "--json",
                          "--random-init"))
    assert "model.onnx" in doc["files"]
    text = _cli("predict", str(out), "a fine film", "a second sentence")
    assert text.split("\t")[0] in ("neg", "pos") and "neg=" in text
    pred = json.loads(_cli("predict", str(out), "a fine film", "--runtime", "onnx", "--json"))
    assert set(pred["probabilities"]) == {"neg", "pos"}
    bench = json.loads(_cli("bench", str(out), "--batch-sizes", "1,2", "--seq-len", "16",
                            "--repeats", "2", "--warmup", "1", "--threads", "1", "--json"))
    rows = bench["results"]
    assert [r["batch_size"] for r in rows] == [1, 2]
    assert all(r["median_ms"] > 0 and r["p90_ms"] >= r["median_ms"] and r["throughput_per_s"] > 0
               for r in rows)
    assert "median" in _cli("bench", str(out), "--batch-sizes", "1", "--seq-len", "8",
                            "--repeats", "1", "--runtime", "onnx")


def test_bench_against_a_teacher_times_both_by_the_one_protocol(tmp_path, monkeypatch):
    """``nas bench DIR --against TEACHER``: a stock transformers teacher is timed as the
    engine's bert design beside the student, in interleaved rounds on the same batch
    (the result's timings are injected: nothing here compares measured time)."""
    from transformers import BertConfig, BertForSequenceClassification

    from nas import runtime, timing
    from nas.network import GraphNet

    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, num_labels=2)).save_pretrained(
        str(tmp_path / "teacher"))
    out = tmp_path / "student"
    _cli("export", "--space", "tinybert", "-c", "num_hidden_layers=1", "-o", str(out),
         "--labels", "neg,pos", "--random-init")
    assert isinstance(runtime.timed_callable(runtime.load(tmp_path / "teacher")), GraphNet)
    seen = []

    def fake_pair(teacher, student, batches, repeats, **kw):
        seen.append((type(teacher).__name__, type(student).__name__, kw["runtime"]))
        teacher(batches[0]), student(batches[0])  # both run the one batch
        return timing.ratio_result([10.0, 11.0, 9.0, 10.0, 10.0], [2.0] * 5, kw["runtime"])

    monkeypatch.setattr(timing, "time_pair", fake_pair)
    doc = json.loads(_cli("bench", str(out), "--batch-sizes", "1,2", "--seq-len", "8",
                          "--repeats", "1", "--warmup", "0", "--against",
                          str(tmp_path / "teacher"), "--json"))
    assert seen == [("GraphNet", "GraphNet", "torch-fp32")] * 2
    rows = doc["against"]["results"]
    assert [r["batch_size"] for r in rows] == [1, 2]
    assert rows[0]["speedup"] == pytest.approx(5.0) and rows[0]["runtime"] == "torch-fp32"
    assert rows[0]["protocol"] == "interleaved" and rows[0]["noisy"] is False
    text = _cli("bench", str(out), "--batch-sizes", "1", "--seq-len", "8", "--repeats", "1",
                "--against", str(tmp_path / "teacher"))
    assert "speed-up over" in text and "5.00x  IQR 5.00-5.00" in text


# ---------------------------------------------------------------------------
# bert-subnet: stock BertForSequenceClassification where the shape allows
# (docs/reference.md#teacher-compression)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_teacher():
    """``(space, supernet)`` of a tiny random transformers BERT teacher (3 layers, width
    32, 4 heads, FFN 48; MiniLM's vocabulary size, so that its tokenizer fits the export),
    as method compress builds them."""
    from transformers import BertConfig, BertForSequenceClassification

    from spaces.bert_subnet import from_teacher

    torch.manual_seed(0)
    hf = BertForSequenceClassification(BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=64, num_labels=2)).eval()
    return from_teacher(hf)


def _subnet_logits(space, supernet, arch, out, tokenizer=False):
    """The child's logits and the export's (loaded by transformers, remote code only if
    the export has it), on one random batch."""
    from transformers import AutoModelForSequenceClassification

    child = extract_child(supernet, space, arch).eval()
    export(space, arch, out, model=child, fmt="hf", tokenizer=tokenizer)
    remote = any(out.glob("modeling_nas_graph_*.py"))
    hf = AutoModelForSequenceClassification.from_pretrained(str(out),
                                                            trust_remote_code=remote).eval()
    batch = batch_for(space, 2, 8)
    batch["input_ids"] = torch.randint(0, 100, batch["input_ids"].shape,
                                       generator=torch.Generator().manual_seed(1))
    batch["attention_mask"][1, 6:] = 0
    with torch.no_grad():
        ours = child(batch).logits
        theirs = hf(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")
                       if k in batch}).logits
    return ours, theirs, hf, remote


def test_a_bert_subnet_child_of_stock_shape_exports_as_stock_bert(tiny_teacher, tmp_path):
    """Layers 0 and 2 kept (1 dropped), all heads, FFN 1/2 in both: a 2-layer stock BERT
    with FFN 24, the kept layers numbered 0 and 1, no remote code; a transformers pipeline
    serves it (with the default MiniLM tokenizer) without trust_remote_code."""
    from transformers import pipeline

    space, supernet = tiny_teacher
    arch = {**space.default(), "L1_keep": 0, "L0_ffn": "1/2", "L2_ffn": "1/2"}
    out = tmp_path / "stock"
    ours, theirs, hf, remote = _subnet_logits(space, supernet, arch, out, tokenizer=None)
    assert not remote and type(hf).__name__ == "BertForSequenceClassification"
    assert hf.config.num_hidden_layers == 2 and hf.config.intermediate_size == 24
    assert not list(out.glob("*.py"))
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)
    answer = pipeline("text-classification", model=str(out))("a gripping, funny film")
    assert answer[0]["label"] in hf.config.id2label.values()


def test_a_bert_subnet_child_of_other_shape_exports_with_remote_code(tiny_teacher, tmp_path):
    """Half of layer 0's heads: transformers 5.x has no per-layer heads, so the hf export
    is the remote-code layout, which computes what the child does."""
    space, supernet = tiny_teacher
    arch = {**space.default(), "L0_heads": "1/2"}
    ours, theirs, _, remote = _subnet_logits(space, supernet, arch, tmp_path / "remote")
    assert remote
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)


def test_stock_subnet_says_why_a_shape_is_not_stock(tiny_teacher):
    from nas.hf import stock_subnet
    from spaces.bert_subnet import bert_subnet_space

    space, _ = tiny_teacher
    config, full = space.config, space.default()
    assert stock_subnet(config, full) == {"num_hidden_layers": 3, "intermediate_size": 48}
    narrow = space.choice_map["hidden_size"].values[1]
    for change, why in [({"hidden_size": narrow}, f"hidden width {narrow} is not the "
                                                  "teacher's 32"),
                        ({"L2_heads": "3/4"}, "layer 2 keeps 3/4 of its heads"),
                        ({"L0_ffn": "1/4"}, "FFN shares 1, 1/4"),
                        ({"L0_keep": 0, "L1_keep": 0, "L2_keep": 0}, "keeps no layer")]:
        with pytest.raises(ExportError, match=why):
            stock_subnet(config, {**full, **change})
    # a dropped layer's choices do not count; the first-k mode keeps the first layers
    assert stock_subnet(config, {**full, "L1_keep": 0, "L1_heads": "0"})["num_hidden_layers"] \
        == 2
    first = bert_subnet_space(**{k: config[k] for k in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "max_position_embeddings")}, layers="first")
    assert stock_subnet(first.config, {**first.default(), "num_hidden_layers": 1}) == {
        "num_hidden_layers": 1, "intermediate_size": 48}


def test_identical_exports_have_identical_bytes(tmp_path):
    """Two exports of the same model give the same bytes in every file but the model card
    (it records measured latency), in every format; the SHA-256s that ``config.json``
    lists are the files'."""
    import hashlib

    space = get_space("tinybert", num_hidden_layers=1)
    torch.manual_seed(0)
    child = build_child(space).eval()
    for fmt in ("native", "onnx", "hf"):
        a, b = (export(space, None, tmp_path / f"{fmt}-{i}", fmt=fmt, model=child,
                       labels=["a", "b"]) for i in (1, 2))
        names = sorted(p.name for p in a.iterdir())
        assert names == sorted(p.name for p in b.iterdir())
        assert {"model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
                "special_tokens_map.json"} <= set(names)
        assert fmt != "onnx" or "model.onnx" in names
        differ = [n for n in names if (a / n).read_bytes() != (b / n).read_bytes()]
        assert differ in ([], ["README.md"]), fmt
        config = json.loads((a / "config.json").read_text())
        listed = config["files"] if fmt != "hf" else config["nas_files"]
        assert set(listed) == set(names) - {"config.json", "README.md"}
        for name, entry in listed.items():
            assert entry["sha256"] == hashlib.sha256((a / name).read_bytes()).hexdigest()
