"""Exports that load anywhere: stock ``transformers`` with the runtime bundled as
remote code, in a process that cannot import this project; ONNX without a second copy of
the weights; tokenizer length; ``--random-init``; round trips of ``derived_arch.json`` and
of Hugging Face checkpoints; ``--quiet``; ``nas bench``'s spread."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
import torch

from nas.builder import build_child
from nas.cli import main
from nas.cost import batch_for
from nas.errors import ExportError
from nas.export import export
from nas.runtime import load
from nas.space import get_space, list_spaces, small_config

TOL = 1e-5
#: every registered space (small), a pair variant, and an AdaBERT with the teacher's
#: vocabulary, so that its export carries the tokenizer (the pipeline runs on text)
VARIANTS = [(n, small_config(n)) for n in list_spaces(tabular=False)] + [
    ("adabert", {**small_config("adabert"), "pair": True}),
    ("adabert", {"hidden": 16, "max_depth": 2, "vocab_size": 30522}),
    ("adabert", {"hidden": 16, "max_depth": 2, "vocab_size": 30522, "pair": True})]

#: Loads export folders with transformers alone (run by the ``without_this_project``
#: fixture, in which every module of this project is blocked).
STOCK_RUNNER = textwrap.dedent("""
    import builtins, json, sys
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
    from transformers import pipeline
    from transformers.utils import logging
    logging.set_verbosity_error()
    logging.disable_progress_bar()

    def prompt(*args):  # transformers asking "run custom code? [y/N]"
        raise SystemExit("prompted: " + " ".join(map(str, args))[:200])

    builtins.input = prompt
    root, texted = sys.argv[1], sys.argv[2]
    batches = torch.load(root + "/batches.pt", weights_only=True)
    out = {"logits": {}, "labels": {}}
    for directory, batch in batches.items():
        AutoConfig.from_pretrained(directory, trust_remote_code=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            directory, trust_remote_code=True).eval()
        with torch.no_grad():
            out["logits"][directory] = model(**batch).logits.tolist()
    out["tokenizer"] = type(AutoTokenizer.from_pretrained(texted, trust_remote_code=True)).__name__
    README_LINE
    out["pipeline"] = [p(text, top_k=None) for text in TEXTS]
    pair = pipeline("text-classification", model=sys.argv[3], trust_remote_code=True)
    out["pair"] = [pair({"text": a, "text_pair": b}, top_k=None) for a, b in PAIRS]
    out["leaked"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps(out))
""")
#: The exports' trained length; the texts and pairs below run past it (a pair's A, B or both
#: longer than half of it), which the stock pipeline does not truncate unless asked.
TRAINED_LENGTH = 16
TEXTS = ["a gripping, beautifully acted film", "dull and far too long",
         "a gripping, beautifully acted film that is dull and far too long " * 3]
PAIRS = [(("the cat sat down on the mat " * a).strip(), ("a cat was sitting " * b).strip())
         for a, b in ((1, 1), (1, 6), (4, 1), (4, 5))]
STOCK_RUNNER = f"TEXTS, PAIRS = {TEXTS!r}, {PAIRS!r}\n" + STOCK_RUNNER


def readme_pipeline_line() -> str:
    """The README's loading example (the tour's stock ``pipeline``), the line that builds the
    pipeline, as it stands; the runner uses it verbatim, with the folder's name as the only
    change."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    [line] = [x for x in readme.splitlines() if x.startswith("p = pipeline(")]
    folder = '"runs/tour/hf"'
    assert folder in line, line
    return line.replace(folder, "texted")


STOCK_RUNNER = STOCK_RUNNER.replace("README_LINE", readme_pipeline_line())


def test_every_space_loads_in_stock_transformers_without_this_package(tmp_path,
                                                                     without_this_project):
    """Every registered space's child, exported natively, loads with
    ``AutoModelForSequenceClassification(..., trust_remote_code=True)`` in a process that
    cannot import ``nas`` and gives ``nas predict``'s logits; all of them in one process,
    each in a folder named ``hf`` (transformers names the remote modules after
    the folder); ``pipeline`` answers with the export's label names and ``nas predict``'s
    probabilities, on texts and pairs longer than the trained length too; the tokenizer
    loads without asking."""
    from safetensors import safe_open

    batches, expected = {}, {}
    texted = paired = None
    for i, (name, config) in enumerate(VARIANTS):
        torch.manual_seed(0)
        space = get_space(name, **config)
        child = build_child(space, space.sample(1)).eval()
        labels = [f"class{i}" for i in range(int(space.config.get("num_labels", 2)))]
        directory = tmp_path / f"{name}-{i}" / "hf"
        export(space, None, directory, model=child, labels=labels,
               max_length=TRAINED_LENGTH)
        config = json.loads((directory / "config.json").read_text())
        assert config["auto_map"]["AutoModelForSequenceClassification"].startswith("modeling_")
        assert len(list(directory.glob("configuration_nas_graph_*.py"))) == 1
        assert not [p.name for p in directory.glob("*.py")
                    if re.search(r"^\s*(from|import)\s+nas\b", p.read_text(), re.MULTILINE)]
        # transformers 4.x copies only the modeling file's own relative imports
        modeling = next(directory.glob("modeling_nas_graph_*.py"))
        imported = set(re.findall(r"^\s*from\s+\.(\S+)\s+import", modeling.read_text(),
                                  re.MULTILINE))
        bundled = {p.stem for p in directory.glob("*.py")} - {modeling.stem}
        assert bundled - {next(directory.glob("configuration_*.py")).stem} <= imported
        with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
            assert f.metadata()["format"] == "pt"  # what transformers 4.x insists on
        batch = batch_for(space, 3, 9)
        if "attention_mask" in batch:
            batch["attention_mask"][1, 6:] = 0
        batch = {k: v for k, v in batch.items() if k in config["inputs"]}
        batches[str(directory)] = batch
        expected[str(directory)] = load(directory)(batch)
        if config["tokenizer"] and config["tokenizer"]["separate_pair"]:
            paired = directory
        elif config["tokenizer"]:
            texted = directory
    assert texted is not None and paired is not None
    torch.save(batches, tmp_path / "batches.pt")
    got = json.loads(without_this_project(STOCK_RUNNER, str(tmp_path), str(texted),
                                          str(paired)))
    assert got["leaked"] == [] and got["tokenizer"].startswith("BertTokenizer")
    for directory, logits in expected.items():
        diff = (torch.tensor(got["logits"][directory]) - logits).abs().max().item()
        assert diff <= TOL, f"{directory}: transformers and nas differ by {diff}"
    check_pipeline_answers(got, texted, paired)


def check_pipeline_answers(got: dict, texted: Path, paired: Path) -> None:
    """The stock pipeline's answers (``got["pipeline"]`` on :data:`TEXTS`, ``got["pair"]``
    on :data:`PAIRS`) are ``nas predict``'s, one text at a time as both run (AdaBERT's
    convolutions see padding, so a padded batch scores a short text slightly
    differently); the long texts and pairs are longer than the trained length."""
    model = load(texted)
    assert max(len(model.tokenizer(t)["input_ids"]) for t in TEXTS) > TRAINED_LENGTH
    for theirs, text in zip(got["pipeline"], TEXTS, strict=True):
        mine = model.predict([text])[0]
        assert {d["label"]: d["score"] for d in theirs} == pytest.approx(
            mine["probabilities"], abs=TOL)
        assert max(theirs, key=lambda d: d["score"])["label"] == mine["label"]
    # a pair model that embeds the second sentence on its own (AdaBERT,
    # docs/reference.md#adabert): the pipeline passes the joined pair, the remote code
    # cuts B out of it as nas does
    model = load(paired)
    for theirs, (a, b) in zip(got["pair"], PAIRS, strict=True):
        mine = model.predict([a], [b])[0]
        assert {d["label"]: d["score"] for d in theirs} == pytest.approx(
            mine["probabilities"], abs=TOL), (a, b)


#: The transformers releases the slow test installs: the oldest 4.x and a 5.x that the
#: package index here holds (4.40, the bound declared before 1cd309a, is not there).
TRANSFORMERS_VERSIONS = ("4.57.6", "5.18.0")
VERSION_RUNNER = textwrap.dedent("""
    import builtins, json, sys
    import torch, transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
    from transformers.utils import logging
    logging.set_verbosity_error()
    logging.disable_progress_bar()

    def prompt(*args):  # transformers asking "run custom code? [y/N]"
        raise SystemExit("prompted: " + " ".join(map(str, args))[:200])

    builtins.input = prompt
    texted, paired, third = sys.argv[1:4]
    out = {"version": transformers.__version__, "logits": {}}
    batch = torch.load(sys.argv[4], weights_only=True)
    for directory in (texted, paired, third):  # three exports, each in a folder named hf
        model = AutoModelForSequenceClassification.from_pretrained(
            directory, trust_remote_code=True).eval()
        with torch.no_grad():
            out["logits"][directory] = model(**batch).logits.tolist()
    # 4.x reads the tokenizer's own class from tokenizer_config.json; 5.x reads config.json
    # first, which names remote code, so there the tokenizer needs trust_remote_code too
    trust = {} if transformers.__version__.startswith("4.") else {"trust_remote_code": True}
    out["tokenizer"] = type(AutoTokenizer.from_pretrained(texted, **trust)).__name__
    README_LINE
    out["pipeline"] = [p(text, top_k=None) for text in TEXTS]
    pair = pipeline("text-classification", model=paired, trust_remote_code=True)
    out["pair"] = [pair({"text": a, "text_pair": b}, top_k=None) for a, b in PAIRS]
    print(json.dumps(out))
""")
VERSION_RUNNER = f"TEXTS, PAIRS = {TEXTS!r}, {PAIRS!r}\n" + VERSION_RUNNER.replace(
    "README_LINE", readme_pipeline_line())


@pytest.mark.slow
@pytest.mark.parametrize("version", TRANSFORMERS_VERSIONS)
def test_exports_load_on_transformers_4_and_5(version, tmp_path, without_this_project):
    """Remote-code exports load on a 4.x and a 5.x ``transformers``, installed
    into a throw-away folder (``pip install --target``, which wins over the installed one
    on ``PYTHONPATH``): three different exports in folders all named ``hf`` in one
    process, each giving ``nas predict``'s logits; the tokenizer loads without a prompt;
    the stock pipeline gives ``nas predict``'s answers past the trained length. A release
    that cannot be installed here skips the test with pip's reason."""
    import subprocess
    import sys

    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", "--target", str(site),
                           f"transformers=={version}"],
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        reason = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        pytest.skip(f"transformers=={version} cannot be installed here: "
                    f"{(reason or done.stderr.splitlines() or ['?'])[-1][:300]}")
    folders = []
    for i, (name, config) in enumerate([
            ("adabert", {"hidden": 16, "max_depth": 2, "vocab_size": 30522}),
            ("adabert", {"hidden": 16, "max_depth": 2, "vocab_size": 30522, "pair": True}),
            ("efficientbert", small_config("efficientbert"))]):
        torch.manual_seed(i)
        space = get_space(name, **config)
        child = build_child(space, space.sample(i)).eval()
        folders.append(export(space, None, tmp_path / f"m{i}" / "hf", model=child,
                              labels=["negative", "positive"], max_length=TRAINED_LENGTH))
    batch = {"input_ids": torch.randint(1, 400, (2, 9), generator=torch.Generator().manual_seed(0)),
             "attention_mask": torch.ones(2, 9, dtype=torch.long),
             "token_type_ids": torch.zeros(2, 9, dtype=torch.long)}
    batch["attention_mask"][1, 6:] = 0
    torch.save(batch, tmp_path / "batch.pt")
    got = json.loads(without_this_project(VERSION_RUNNER, *map(str, folders),
                                          str(tmp_path / "batch.pt"), path=str(site)))
    assert got["version"] == version and got["tokenizer"].startswith("BertTokenizer")
    for folder in (folders[0], folders[2]):  # the pair model's batch: the pipeline below
        ours = load(folder)(batch)
        assert (torch.tensor(got["logits"][str(folder)]) - ours).abs().max() <= TOL, folder
    check_pipeline_answers(got, folders[0], folders[1])


def test_hf_format_of_a_searched_family_is_remote_code(tmp_path):
    space = get_space("adabert", hidden=16, max_depth=2)  # the teacher's vocabulary
    child = build_child(space, space.sample(2))
    out = export(space, space.sample(2), tmp_path / "hf", fmt="hf", model=child,
                 labels=["negative", "positive"], max_length=64)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "nas_graph" and config["id2label"] == {
        "0": "negative", "1": "positive"}
    tokenizer = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer["model_max_length"] == 64 == config["tokenizer"]["max_length"]
    model = load(out)
    assert model.tokenizer.model_max_length == 64
    assert model.encode(["word " * 200])["input_ids"].shape[1] == 64


def test_onnx_export_keeps_its_weights_inside_the_file(tmp_path):
    """Stock tools read the graph alone: quant_pre_process and ONNX Runtime's optimiser do
    not follow external data into another format's file (model.safetensors)."""
    space = get_space("tinybert", num_hidden_layers=2)
    torch.manual_seed(0)
    child = build_child(space).eval()
    out = export(space, None, tmp_path / "onnx", fmt="onnx", model=child)
    assert all(p.stat().st_mode & 0o044 for p in out.iterdir())  # readable by others too
    batch = batch_for(space, 2, 13)
    torch_logits = load(out, "torch")(batch)
    assert (load(out, "onnx")(batch) - torch_logits).abs().max() <= 1e-4
    import onnx

    proto = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert not [t.name for t in proto.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL]
    weights = (out / "model.safetensors").stat().st_size
    assert (out / "model.onnx").stat().st_size > weights * 0.9  # the weights are in it


def test_random_init_is_explicit_recorded_and_warned(tmp_path, capsys):
    out = tmp_path / "m"
    args = ["export", "--space", "adabert", "-c", "hidden=16", "-c", "max_depth=2", "-o",
            str(out)]
    assert main(args) == 2
    assert "--random-init" in capsys.readouterr().err and not out.exists()
    assert list(tmp_path.iterdir()) == []  # a refused export leaves nothing behind
    assert main([*args, "--random-init", "--quiet"]) == 0
    assert json.loads((out / "config.json").read_text())["random_init"] is True
    capsys.readouterr()
    assert main(["predict", str(out), "a fine film", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "untrained" in captured.err and len(captured.out.strip().splitlines()) == 1


def test_arch_accepts_a_runs_derived_arch(tmp_path, capsys):
    space = get_space("adabert", vocab_size=500, hidden=16, max_depth=3)
    arch = space.sample(5)
    derived = tmp_path / "derived_arch.json"
    derived.write_text(json.dumps({**arch.to_dict(), "space": "adabert", "id": arch.id,
                                   "space_config": {"vocab_size": 500, "hidden": 16,
                                                    "max_depth": 3}}))
    assert main(["export", "--arch", str(derived), "--random-init", "-o", str(tmp_path / "x"),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["arch_id"] == arch.id and doc["space"] == "adabert"
    config = json.loads((tmp_path / "x" / "config.json").read_text())
    assert config["architecture"]["choices"] == dict(arch)
    assert config["space"]["config"]["hidden"] == 16


def _hf_checkpoint(path: Path) -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64, id2label={0: "bad", 1: "good"},
                        label2id={"bad": 0, "good": 1})
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(str(path))
    return model


def test_weights_accept_a_hugging_face_checkpoint(tmp_path, capsys):
    from nas.export import default_tokenizer_dir

    ckpt = tmp_path / "ckpt"
    hf_model = _hf_checkpoint(ckpt)
    for fmt in ("native", "hf"):
        out = tmp_path / fmt
        assert main(["export", "--weights", str(ckpt), "-o", str(out), "--format", fmt,
                     "--tokenizer", str(default_tokenizer_dir()), "--quiet"]) == 0
        model = load(out)
        assert model.labels == ["bad", "good"] and not model.random_init
        batch = model.encode(["a fine film", "a dull one"])
        with torch.no_grad():
            want = hf_model(**batch).logits
        assert (model(batch) - want).abs().max() <= TOL
    capsys.readouterr()
    # a checkpoint of another shape is refused in one line, and nothing is left behind
    assert main(["export", "--space", "bert", "-c", "hidden_size=64", "--weights", str(ckpt),
                 "-o", str(tmp_path / "wrong")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "shape" in err
    assert not (tmp_path / "wrong").exists()


def test_the_cached_fine_tuned_teacher_exports(tmp_path):
    teachers = Path.home() / ".cache" / "nas-engine" / "teachers"
    folders = sorted(teachers.glob("*/model/config.json")) if teachers.is_dir() else []
    if not folders:
        pytest.skip("no fine-tuned teacher in the cache")
    folder = folders[0].parent
    assert main(["export", "--weights", str(folder), "-o", str(tmp_path / "t"), "--quiet"]) == 0
    model = load(tmp_path / "t")
    record = json.loads((folder.parent / "result.json").read_text())
    assert model.config["task"] == record["task"]
    if record["task"] == "sst2":
        assert model.labels == ["negative", "positive"]  # the task's names
    assert model.tokenizer_settings["max_length"] == record["config"]["max_seq_len"]
    from transformers import AutoModelForSequenceClassification

    teacher = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    batch = model.encode(["a gorgeous, witty, seductive movie", "it is a mess"])
    with torch.no_grad():
        assert (model(batch) - teacher(**batch).logits).abs().max() <= TOL


def test_quiet_silences_the_libraries_and_is_undone(capsys):
    import logging

    from transformers.utils import logging as hf_logging

    from nas.cli import _silence, build_parser

    before = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    args = build_parser().parse_args(["spaces", "list", "--quiet"])
    undo = _silence(args)
    try:
        assert hf_logging.get_verbosity() == hf_logging.ERROR
        assert not hf_logging.is_progress_bar_enabled()
        assert logging.root.manager.disable >= logging.INFO  # our log lines are off
    finally:
        undo()
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == before
    # --no-progress reaches transformers' bars and load reports too (not our log lines)
    undo = _silence(build_parser().parse_args(["run", "x.yaml", "--no-progress"]))
    try:
        assert not hf_logging.is_progress_bar_enabled()
        assert hf_logging.get_verbosity() == hf_logging.ERROR
        assert logging.root.manager.disable < logging.INFO
    finally:
        undo()
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == before


def test_bench_reports_the_spread_and_flags_noise(tmp_path, capsys, monkeypatch):
    from nas import timing

    space = get_space("adabert", **small_config("adabert"))
    out = export(space, None, tmp_path / "b", random_init=True)
    # a noisy machine, made deterministic: every other run takes twice as long
    clock = iter(x * 1e-3 for pair in ((0, 10), (10, 30)) * 50 for x in pair)
    ticks = [0.0]

    def fake_clock() -> float:
        ticks[0] = next(clock, ticks[0])
        return ticks[0]

    monkeypatch.setattr(timing.time, "perf_counter", fake_clock)
    assert main(["bench", str(out), "--batch-sizes", "1", "--seq-len", "8", "--repeats", "8",
                 "--warmup", "0", "--json"]) == 0
    captured = capsys.readouterr()
    row = json.loads(captured.out)["results"][0]
    assert row["iqr_ms"] == pytest.approx(10.0) and row["noisy"] is True
    assert "IQR" in captured.err and "warning" in captured.err


def test_a_user_op_that_needs_another_package_cannot_be_bundled(tmp_path, monkeypatch):
    from nas import remote_code

    monkeypatch.setattr(remote_code, "ALLOWED", frozenset({"__future__", "transformers"}))
    space = get_space("adabert", **small_config("adabert"))
    with pytest.raises(ExportError, match="imports torch"):
        export(space, None, tmp_path / "x", fmt="hf", random_init=True)
    assert not (tmp_path / "x").exists()


def test_an_export_without_a_tokenizer_refuses_text(tmp_path, capsys):
    """A student with its own small vocabulary, exported without its tokenizer, must not
    answer from a tokenizer transformers makes up (every word [UNK])."""
    out = tmp_path / "mv"
    assert main(["export", "--space", "mixedvocab", "-o", str(out), "--format", "hf",
                 "--random-init", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["predict", str(out), "a fine film"]) == 2
    assert "has no tokenizer" in capsys.readouterr().err


def test_quiet_reaches_libraries_the_command_imports_later(tmp_path):
    """A quiet command that imports transformers only later (most do) finds it quiet,
    without the flag importing it up front; afterwards it is as loud as by default."""
    import subprocess
    import sys

    script = textwrap.dedent("""
        import sys
        from nas.cli import _silence, build_parser
        undo = _silence(build_parser().parse_args(["spaces", "list", "--quiet"]))
        assert "transformers" not in sys.modules
        from transformers.utils import logging
        print(logging.is_progress_bar_enabled(), logging.get_verbosity())
        undo()
        print(logging.is_progress_bar_enabled(), logging.get_verbosity())
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "40", "True", "30"]

