"""int8 ONNX Runtime exports (``--format onnx --quantize int8``, ``final.export``) and ONNX
files that stock tools accept: weights inside the file, the tokenizer's own output as the
graph's inputs, a stock ``transformers`` folder traced to ONNX at its trained length."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from nas.cli import main
from nas.errors import ExportError
from nas.export import convert, export
from nas.quantize import DevSet, layer_groups, needs_reduce_range, quantize_export
from nas.runtime import load
from nas.space import get_space

TEXTS = ["a gorgeous, witty, seductive movie", "the plot is thin and the jokes fall flat",
         "an honest film", "dull", "one of the year's best", "I wanted my money back"]


@pytest.fixture(scope="module")
def adabert_onnx(tmp_path_factory) -> Path:
    """An AdaBERT child (its cells ignore token types) exported to fp32 ONNX."""
    out = tmp_path_factory.mktemp("ada") / "onnx"
    return export(get_space("adabert"), None, out, fmt="onnx", random_init=True,
                  labels=["negative", "positive"])


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_onnx_graph_takes_the_tokenizers_unfiltered_output(adabert_onnx):
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = load(adabert_onnx, "onnx")
    encoded = dict(model.tokenizer(TEXTS[0], return_tensors="np"))
    assert sorted(encoded) == ["attention_mask", "input_ids", "token_type_ids"]
    session = ort.InferenceSession(str(adabert_onnx / "model.onnx"))
    assert sorted(i.name for i in session.get_inputs()) == sorted(encoded)
    logits = session.run(None, encoded)[0]  # every key, the unused token types included
    expected = load(adabert_onnx, "torch")({k: __import__("torch").from_numpy(v)
                                            for k, v in encoded.items()})
    assert np.abs(logits - expected.numpy()).max() <= 1e-4
    proto = onnx.load(str(adabert_onnx / "model.onnx"), load_external_data=False)
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    quant_pre_process(str(adabert_onnx / "model.onnx"),
                      str(adabert_onnx.parent / "pre.onnx"), skip_symbolic_shape=True)
    assert (adabert_onnx.parent / "pre.onnx").stat().st_size > 0


def test_int8_export_without_dev_says_not_measured_and_answers_from_onnx(tmp_path, capsys):
    out = tmp_path / "int8"
    code, _, err = _cli(capsys, "export", "--space", "adabert", "--random-init", "-o", str(out),
                        "--format", "onnx", "--quantize", "int8", "--labels", "neg,pos")
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    record = config["quantization"]
    assert record["dev"] == "not measured"
    assert record["per_channel"] is True and record["weights"] == "int8"
    assert record["reduce_range"] == needs_reduce_range()
    assert record["optimizer"] is None  # not a BERT-shaped graph: skipped, recorded
    assert record["int8_onnx_bytes"] < record["fp32_onnx_bytes"] / 2
    assert set(record["latency"]) >= {"fp32", "int8", "speedup"}
    assert "int8" in (out / "README.md").read_text()
    assert load(out).runtime == "onnx"  # auto: the graph the export ships
    code, text, err = _cli(capsys, "predict", str(out), "a fine film", "--json")
    assert code == 0, err
    assert json.loads(text)["label"] in ("neg", "pos")
    code, _, err = _cli(capsys, "predict", str(out), "a fine film", "--runtime", "torch")
    assert code == 2
    assert err.count("\n") == 1 and "an int8 export answers from model.onnx" in err
    native = convert(out, tmp_path / "native", "native")  # from the fp32 weights beside it
    assert "quantization" not in json.loads((native / "config.json").read_text())
    assert load(native).runtime == "torch"


def test_quantize_needs_the_onnx_format(tmp_path, capsys):
    code, _, err = _cli(capsys, "export", "--space", "adabert", "--random-init", "-o",
                        str(tmp_path / "x"), "--quantize", "int8")
    assert code == 2
    assert err.strip() == ("error: --quantize int8 needs --format onnx (it quantises "
                           "model.onnx), got --format native")
    assert not (tmp_path / "x").exists()


def test_reduce_range_only_on_x86_without_vnni():
    assert needs_reduce_range("x86_64", {"avx2", "fma"}) is True
    assert needs_reduce_range("x86_64", {"avx2", "avx512_vnni"}) is False
    assert needs_reduce_range("x86_64", {"avx2", "avx_vnni"}) is False
    assert needs_reduce_range("aarch64", set()) is False


def test_dev_comparison_and_fp32_layers_are_recorded(adabert_onnx, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(adabert_onnx, folder)
    config = json.loads((folder / "config.json").read_text())
    fp32 = load(folder, "onnx").predict(TEXTS)
    labels = [["negative", "positive"].index(r["label"]) for r in fp32]
    dev = DevSet(TEXTS, None, labels, "accuracy")
    # a bound no graph can meet: every layer is tried in fp32 until none helps
    record = quantize_export(folder, config, dev, max_drop=-1.0, seq_len=16)
    scores = record["dev"]
    assert scores["examples"] == len(TEXTS) and scores["fp32"] == 100.0
    assert scores["int8"] == pytest.approx(100.0 * scores["agreement"])
    assert scores["change_points"] == pytest.approx(scores["int8"] - scores["fp32"])
    assert "more than max_int8_drop -1.0" in scores["warning"]
    excluded = record["excluded_nodes"]
    assert len(scores["fp32_layers"]) <= len(excluded)
    assert set(excluded) <= {n for nodes in layer_groups(folder / "model.onnx").values()
                             for n in nodes} | set(excluded)


def test_a_stock_transformers_folder_converts_to_int8_onnx_at_its_length(
        tiny_teacher, tmp_path, capsys):
    hf = tmp_path / "hf"
    code, _, err = _cli(capsys, "export", "--weights", str(tiny_teacher), "-o", str(hf),
                        "--format", "hf", "--max-length", "24")
    assert code == 0, err
    assert json.loads((hf / "config.json").read_text())["model_type"] == "bert"
    fp32 = convert(hf, tmp_path / "onnx", "onnx")
    assert json.loads((fp32 / "config.json").read_text())["nas_tokenizer"]["max_length"] == 24
    onnx_model, torch_model = load(fp32, "onnx"), load(fp32, "torch")
    batch = torch_model.encode(TEXTS)
    assert (onnx_model(batch) - torch_model(batch)).abs().max() <= 1e-4
    int8 = convert(hf, tmp_path / "int8", "onnx", quantize="int8",
                   dev=DevSet(TEXTS, None, [0, 1, 1, 0, 1, 0], "accuracy"))
    record = json.loads((int8 / "config.json").read_text())["nas_quantization"]
    assert record["optimizer"] == "bert" and record["latency"]["seq_len"] == 24
    assert record["dev"]["examples"] == len(TEXTS)
    assert load(int8).runtime == "onnx"
    assert len(load(int8).predict(TEXTS)) == len(TEXTS)
    # the --weights route reads the trained length the folder records, not 128
    again = tmp_path / "again"
    code, _, err = _cli(capsys, "export", "--weights", str(hf), "-o", str(again))
    assert code == 0, err
    assert json.loads((again / "config.json").read_text())["tokenizer"]["max_length"] == 24
    with pytest.raises(ExportError, match="already a transformers export; --format onnx"):
        convert(hf, tmp_path / "native", "native")
    # an int8 folder converts again from the fp32 weights beside its graph
    again = convert(int8, tmp_path / "fp32-again", "onnx")
    assert "nas_quantization" not in json.loads((again / "config.json").read_text())
    assert (load(again, "onnx")(batch) - torch_model(batch)).abs().max() <= 1e-4


def test_a_run_of_stock_transformers_results_converts_every_point_optimised(
        tiny_teacher, tmp_path, capsys):
    """A compress run whose points are stock BERT folders (written by hand here: the run's
    snapshot, the searched model and two final points): nas export --run converts each
    at its trained length, through ONNX Runtime's BERT optimiser, compared on dev as the
    run cut it."""
    import shutil

    run = tmp_path / "run"
    hf = tmp_path / "hf"
    code, _, err = _cli(capsys, "export", "--weights", str(tiny_teacher), "-o", str(hf),
                        "--format", "hf", "--max-length", "24", "--labels",
                        "negative,positive")
    assert code == 0, err
    for folder in ("export", "final/k1/export", "final/k2/export"):
        shutil.copytree(hf, run / folder)
    (run / "config.yaml").write_text("method: compress\ntask: sst2\nseed: 0\n"
                                     "data: {max_dev_examples: 16}\n"
                                     "final: {export: {max_int8_drop: 1.5}}\n")
    code, text, err = _cli(capsys, "export", "--run", str(run), "--format", "onnx",
                           "--quantize", "int8", "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["directory"] == str(run / "exports" / "onnx-int8")
    assert [d["directory"] for d in doc["final"]] == [
        str(run / "final" / k / "exports" / "onnx-int8") for k in ("k1", "k2")]
    for out in [doc["directory"], *(d["directory"] for d in doc["final"])]:
        config = json.loads((Path(out) / "config.json").read_text())
        record = config["nas_quantization"]
        assert config["model_type"] == "bert" and record["optimizer"] == "bert"
        assert config["nas_tokenizer"]["max_length"] == 24 == record["latency"]["seq_len"]
        assert record["dev"]["examples"] == 16 and record["dev"]["max_drop_points"] == 1.5
        assert load(out).runtime == "onnx"


def test_the_int8_file_runs_with_onnxruntime_and_tokenizers_alone(
        tmp_path, capsys, without_this_project):
    out = tmp_path / "int8"
    code, _, err = _cli(capsys, "export", "--space", "adabert", "--random-init", "-o", str(out),
                        "--format", "onnx", "--quantize", "int8", "--max-length", "32")
    assert code == 0, err
    expected = load(out).predict(TEXTS[:2])
    script = """
import json, sys
for name in ("torch", "transformers"):  # a stock environment: neither is needed
    sys.modules[name] = None
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer
folder = sys.argv[1]
tokenizer = Tokenizer.from_file(folder + "/tokenizer.json")
tokenizer.enable_truncation(32)
tokenizer.no_padding()  # one text as it is (the teacher's tokenizer.json pads to 128)
session = ort.InferenceSession(folder + "/model.onnx", providers=["CPUExecutionProvider"])
out = []
for text in sys.argv[2:]:
    e = tokenizer.encode(text)
    feed = {"input_ids": [e.ids], "token_type_ids": [e.type_ids],
            "attention_mask": [e.attention_mask]}  # what the tokenizer returns, unfiltered
    logits = session.run(None, {k: np.array(v, dtype=np.int64) for k, v in feed.items()})[0]
    out.append(logits[0].tolist())
print(json.dumps(out))
"""
    logits = json.loads(without_this_project(script, str(out), *TEXTS[:2]).splitlines()[-1])
    probs = [np.exp(row) / np.exp(row).sum() for row in np.asarray(logits)]
    for got, want in zip(probs, expected, strict=True):
        assert got == pytest.approx(list(want["probabilities"].values()), abs=1e-5)


def test_final_export_settings_quantize_every_final_point_on_dev():
    from nas.config import ConfigError
    from recipes.common import TaskContext
    from recipes.search_config import FinalExport, FinalSettings

    with pytest.raises((ConfigError, ValueError), match="quantize.*int8, with format: onnx"):
        FinalExport(quantize="int8")
    settings = FinalSettings(export=FinalExport(format="onnx", quantize="int8",
                                                max_int8_drop=0.5))
    dev = SimpleNamespace(texts_a=["a", "b"], texts_b=None, labels=[0, 1])
    ctx = SimpleNamespace(cfg=SimpleNamespace(final=settings), dev=dev, metric="accuracy")
    keywords = TaskContext.format_keywords(ctx, "native")  # type: ignore[arg-type]
    assert keywords["fmt"] == "onnx" and keywords["quantize"] == "int8"
    assert keywords["max_int8_drop"] == 0.5
    assert keywords["dev"] == DevSet(["a", "b"], None, [0, 1], "accuracy")
    plain = SimpleNamespace(cfg=SimpleNamespace(final=FinalSettings()), dev=dev)
    assert TaskContext.format_keywords(plain, "native") == {"fmt": "native"}  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["adabert", "compress"])
def test_a_runs_results_convert_to_int8_and_are_read(smoke_runs, method, tmp_path, capsys):
    run = smoke_runs(method)
    capsys.readouterr()  # the smoke run's own lines
    out = tmp_path / "int8"
    code, text, err = _cli(capsys, "export", "--run", str(run), "--format", "onnx",
                           "--quantize", "int8", "-o", str(out), "--json")
    assert code == 0, err
    doc = json.loads(text)
    finals = sorted((run / "final").glob("*/export")) if (run / "final").is_dir() else []
    assert len(doc["final"]) == len(finals)  # every final point, not only the first
    for entry in doc["final"]:
        assert "model.onnx" in entry["files"]
    config = json.loads((out / "config.json").read_text())
    record = config.get("quantization") or config["nas_quantization"]
    trained = (config.get("tokenizer") or config.get("nas_tokenizer"))["max_length"]
    assert trained == 32 == record["latency"]["seq_len"]  # the run's length, not 128
    dev = record["dev"]
    assert dev["examples"] == 64 and 0.0 <= dev["agreement"] <= 1.0
    assert "int8" in (out / "README.md").read_text()
    code, text, err = _cli(capsys, "predict", str(out), "a fine film", "--json")
    assert code == 0, err
    code, text, err = _cli(capsys, "evaluate", str(out), "--json")  # the test split, int8
    assert code == 0, err
    scored = json.loads(text)
    assert scored["split"] == "test" and 0.0 <= scored["metrics"]["accuracy"] <= 1.0
    if method == "compress":  # a run with final points: the Python face too
        from nas.api import SearchResult

        api = SearchResult.open(run).export(tmp_path / "api", "onnx", quantize="int8")
        assert json.loads((api / "config.json").read_text())["quantization"]["dev"] == dev


def test_every_family_exports_an_int8_graph_that_reads_its_tokenizers_output(tmp_path):
    """Stock (bert) and remote-code families alike: the int8 graph is model.onnx, runs on
    what the export's tokenizer returns, and answers within reach of the fp32 graph."""
    import torch

    from nas.builder import build_child
    from nas.space import list_spaces, small_config

    for name in list_spaces(tabular=False):
        torch.manual_seed(0)
        space = get_space(name, **small_config(name))
        child = build_child(space, space.sample(3)).eval()
        fp32 = export(space, None, tmp_path / f"{name}-fp32", fmt="onnx", model=child)
        int8 = export(space, None, tmp_path / f"{name}-int8", fmt="onnx", model=child,
                      quantize="int8")
        model = load(int8)
        assert model.runtime == "onnx", name
        config = json.loads((int8 / "config.json").read_text())
        assert config["quantization"]["dev"] == "not measured", name
        names = sorted(i.name for i in model.network.get_inputs())
        if config.get("tokenizer"):
            encoded = dict(model.tokenizer(TEXTS[0], return_tensors="np"))
            assert sorted(encoded) == names, name  # exactly what the tokenizer returns
            batch = {k: torch.from_numpy(v) for k, v in encoded.items()}
        else:
            from nas.cost import batch_for

            batch = batch_for(space, 1, 9)
        got, want = model(batch), load(fp32, "onnx")(batch)
        assert got.shape == want.shape and bool(torch.isfinite(got).all()), name


@pytest.mark.slow
def test_final_export_in_the_experiment_file_quantizes_every_final_point(tiny_teacher, tmp_path):
    """compress's truncation arm with the tiny teacher: two final points (one and two
    layers), each exported as int8 ONNX and compared on dev."""
    from test_compress import _tiny_compress

    run = tmp_path / "run"
    assert _tiny_compress(run, tiny_teacher, "searcher=truncation",
                          "evaluator.settings.max_steps=1", "final={select: all, seeds: 1, "
                          "export: {format: onnx, quantize: int8, max_int8_drop: 0.5}}") == 0
    folders = [run / "export", *sorted((run / "final").glob("*/export"))]
    assert len(folders) == 3
    for folder in folders:
        record = json.loads((folder / "config.json").read_text())["quantization"]
        assert record["dev"]["examples"] == 64 and record["dev"]["max_drop_points"] == 0.5
        assert load(folder).runtime == "onnx"
