"""The standalone runtime: load an exported model directory and run it (STYLE.md pattern 7).

An export directory (written by :mod:`nas.export`) holds

* ``config.json`` -- the space it came from (name and configuration, for the record), the
  architecture, the **resolved child graph** (:func:`nas.graph.to_json`), the label names,
  the model's input names and the tokenizer settings;
* ``model.safetensors`` -- the child's weights under their graph names;
* ``model.onnx`` (``--format onnx``) -- the same network for onnxruntime;
* the tokenizer files (``tokenizer.json``, ``vocab.txt``...), when the export has one.

This module rebuilds the network from the graph alone (``GraphNet(from_json(graph),
resolved=True)``): it imports nothing from ``spaces``, ``searchers`` or ``evaluators``, so
an exported model runs wherever the ``nas`` package's ops are installed, even if the
space's module is gone. A ``--format hf`` directory (a plain ``transformers`` model) is
loaded with ``transformers`` instead.

Every problem with a directory (a missing file, broken JSON, an unknown op, weights that
do not fit the graph) raises :class:`nas.errors.ExportError` naming the file and the
problem.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from nas.errors import ExportError, NasError

FORMAT = "nas-export"
FORMAT_VERSION = 2  # 2: config.json lists every file with its size and SHA-256
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ONNX_FILE = "model.onnx"
RUNTIMES = ("torch", "onnx")


def read_config(directory: str | Path) -> dict[str, Any]:
    """``config.json`` of an export directory, checked for the keys the runtime needs."""
    path = Path(directory) / CONFIG_FILE
    if not Path(directory).is_dir():
        raise ExportError(f"{directory}: no such export directory")
    if not path.is_file():
        raise ExportError(f"{path}: missing; not an exported model directory (run nas export)")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ExportError(f"{path}: broken JSON at line {err.lineno} column {err.colno}: "
                          f"{err.msg}") from None
    if not isinstance(config, dict):
        raise ExportError(f"{path}: expected a JSON object")
    if config.get("format") != FORMAT and "model_type" not in config:
        raise ExportError(f"{path}: not a nas export (no \"format\": \"{FORMAT}\") and not a "
                          "transformers config (no \"model_type\")")
    if config.get("format") == FORMAT:
        for key in ("graph", "labels", "inputs"):
            if key not in config:
                raise ExportError(f"{path}: lacks the key {key!r}; the export is incomplete")
        if int(config.get("format_version", 0)) > FORMAT_VERSION:
            raise ExportError(f"{path}: format_version {config['format_version']} is newer than "
                              f"this runtime's ({FORMAT_VERSION}); upgrade the nas package")
    return config


MANIFEST_KEY = "files"  # native exports; an hf export keeps it under "nas_files"


def file_manifest(directory: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of every file of an export directory except ``config.json``."""
    import hashlib

    manifest = {}
    for path in sorted(p for p in directory.iterdir() if p.is_file() and p.name != CONFIG_FILE):
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        manifest[path.name] = {"size": path.stat().st_size, "sha256": digest.hexdigest()}
    return manifest


def verify_files(directory: Path, config: Mapping[str, Any]) -> None:
    """Refuse an export whose files are missing or changed since it was written.

    A missing tokenizer file once made the runtime fall back to a tiny vocabulary and
    answer confidently from ``[UNK]`` tokens: never answer from a partial export.
    """
    manifest = config.get(MANIFEST_KEY) if config.get("format") == FORMAT \
        else config.get("nas_files")
    if manifest is None:
        if config.get("format") == FORMAT:
            raise ExportError(f"{directory / CONFIG_FILE}: lists no files (an export of an "
                              "older version); re-export it")
        return  # a plain transformers directory written elsewhere
    if not isinstance(manifest, dict):
        raise ExportError(f"{directory / CONFIG_FILE}: the file list is malformed; re-export")
    actual = file_manifest(directory)
    for name, want in manifest.items():
        if name not in actual:
            raise ExportError(f"{directory / name}: missing (the export lists it); copy the "
                              "whole export directory or re-export")
        if not isinstance(want, dict) or actual[name] != {"size": want.get("size"),
                                                          "sha256": want.get("sha256")}:
            raise ExportError(f"{directory / name}: changed since the export was written "
                              "(size or SHA-256 differs); re-export")


def build_network(config: Mapping[str, Any], source: str = CONFIG_FILE) -> torch.nn.Module:
    """The child network of an export config, with freshly initialised weights."""
    from nas.graph import from_json
    from nas.network import GraphNet

    try:
        graph = from_json(config["graph"])
    except NasError as err:
        raise ExportError(f"{source}: bad graph: {err}") from None
    except (KeyError, TypeError, ValueError) as err:
        raise ExportError(f"{source}: the graph is malformed ({type(err).__name__}: {err})") \
            from None
    try:
        return GraphNet(graph, resolved=True)
    except NasError as err:
        raise ExportError(f"{source}: cannot build the graph: {err}") from None
    except (KeyError, TypeError, ValueError) as err:
        raise ExportError(f"{source}: an op's parameters are missing or malformed "
                          f"({type(err).__name__}: {err})") from None


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, or an ExportError naming it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise ExportError(f"{path}: missing; the export has no weights (re-run nas export)")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise ExportError(f"{path}: not a readable safetensors file ({err})") from None


@torch.no_grad()
def load_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Copy ``state`` into ``model`` exactly: every tensor present, no extra, same shapes."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    extra = [k for k in state if k not in own]
    if missing:
        raise ExportError(f"{source}: lacks {len(missing)} tensor(s) the graph needs, e.g. "
                          f"{missing[:3]}")
    if extra:
        raise ExportError(f"{source}: has {len(extra)} tensor(s) the graph does not use, e.g. "
                          f"{extra[:3]}")
    for name, tensor in own.items():
        src = state[name]
        if tuple(src.shape) != tuple(tensor.shape):
            raise ExportError(f"{source}: tensor {name} has shape {tuple(src.shape)}, but the "
                              f"graph in {CONFIG_FILE} needs {tuple(tensor.shape)}")
        tensor.copy_(src)


class ExportedModel:
    """A loaded export: ``model(batch)`` gives logits; :meth:`predict` works from text."""

    def __init__(self, directory: Path, config: dict[str, Any], runtime: str,
                 network: Any) -> None:
        self.directory = directory
        self.config = config
        self.runtime = runtime
        self.network = network
        self._tokenizer: Any = None

    # ------------------------------------------------------------------ facts
    @property
    def is_hf(self) -> bool:
        return self.config.get("format") != FORMAT

    @property
    def labels(self) -> list[str]:
        if self.is_hf:  # transformers leaves default names out of config.json
            id2label = self.network.config.id2label
            return [id2label[k] for k in sorted(id2label, key=int)]
        return list(self.config["labels"])

    @property
    def inputs(self) -> list[str]:
        if self.is_hf:
            return ["input_ids", "attention_mask", "token_type_ids"]
        return list(self.config["inputs"])

    @property
    def tokenizer_settings(self) -> dict[str, Any]:
        if self.is_hf:
            return dict(self.config.get("nas_tokenizer") or {"max_length": 128,
                                                              "separate_pair": False})
        return dict(self.config.get("tokenizer") or {})

    @property
    def vocab_size(self) -> int:
        if self.is_hf:
            return int(self.config["vocab_size"])
        return int(self.config.get("vocab_size") or 1000)

    # ------------------------------------------------------------------ running
    def __call__(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits ``(B, num_labels)`` for a batch of id tensors ``(B, L)``."""
        feed = {k: batch[k] for k in self.inputs if k in batch}
        if self.runtime == "onnx":
            names = [i.name for i in self.network.get_inputs()]
            arrays = {n: feed[n].cpu().numpy().astype("int64") for n in names}
            return torch.from_numpy(self.network.run(None, arrays)[0])
        with torch.no_grad():
            if self.is_hf:
                return self.network(**feed).logits
            return self.network(feed).logits

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if not self.is_hf and not self.config.get("tokenizer"):
                raise ExportError(f"{self.directory}: the export has no tokenizer; re-export "
                                  "with --tokenizer DIR to run it on text")
            from nas.tokenization import load_tokenizer

            try:
                self._tokenizer = load_tokenizer(self.directory)
            except (NasError, OSError) as err:
                raise ExportError(f"{self.directory}: cannot load the tokenizer files "
                                  f"({err})") from None
        return self._tokenizer

    def encode(self, texts_a: Sequence[str], texts_b: Sequence[str] | None = None
               ) -> dict[str, torch.Tensor]:
        """Token ids for texts, as the model was trained (pairs joined and/or separate)."""
        from nas.tokenization import encode

        settings = self.tokenizer_settings
        return encode(self.tokenizer, texts_a, texts_b, int(settings.get("max_length", 128)),
                      separate_b=bool(settings.get("separate_pair", False)))

    def predict(self, texts_a: Sequence[str], texts_b: Sequence[str] | None = None
                ) -> list[dict[str, Any]]:
        """``[{"label": name, "probabilities": {name: p}}]``, one per example."""
        logits = self(self.encode(texts_a, texts_b))
        probs = torch.softmax(logits.float(), dim=-1)
        labels = self.labels
        out = []
        for row in probs:
            best = int(torch.argmax(row))
            out.append({"label": labels[best],
                        "probabilities": {labels[i]: float(p) for i, p in enumerate(row)}})
        return out


def load(directory: str | Path, runtime: str = "torch", threads: int | None = None
         ) -> ExportedModel:
    """Load an export directory with the ``torch`` (default) or ``onnx`` runtime.

    ``threads`` sets the intra-op threads of either runtime (default: the library's own).
    On a shared machine one thread is often faster than several competing ones.
    """
    if runtime not in RUNTIMES:
        raise ExportError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    if threads and runtime == "torch":
        torch.set_num_threads(int(threads))
    directory = Path(directory)
    config = read_config(directory)
    verify_files(directory, config)
    if config.get("format") != FORMAT:  # a --format hf directory
        if runtime == "onnx":
            raise ExportError(f"{directory}: a transformers-format export has no {ONNX_FILE}; "
                              "export with --format onnx")
        from transformers import AutoModelForSequenceClassification

        try:
            net = AutoModelForSequenceClassification.from_pretrained(
                str(directory), local_files_only=True)
        except (OSError, ValueError) as err:
            raise ExportError(f"{directory}: transformers cannot load it ({err})") from None
        return ExportedModel(directory, config, runtime, net.eval())
    if runtime == "onnx":
        path = directory / ONNX_FILE
        if not path.is_file():
            raise ExportError(f"{path}: missing; export with --format onnx to run on onnxruntime")
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        try:
            session = ort.InferenceSession(str(path), options,
                                           providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own untyped errors
            raise ExportError(f"{path}: onnxruntime cannot load it ({err})") from None
        return ExportedModel(directory, config, runtime, session)
    network = build_network(config, str(directory / CONFIG_FILE))
    path = directory / WEIGHTS_FILE
    load_state(network, read_weights(path), str(path))
    return ExportedModel(directory, config, runtime, network.eval())


def random_batch(model: ExportedModel, batch_size: int, seq_len: int, seed: int = 0
                 ) -> dict[str, torch.Tensor]:
    """Random ids in the model's vocabulary with full masks (for timing only)."""
    g = torch.Generator().manual_seed(seed)
    vocab = min(model.vocab_size, 30000)
    batch = {}
    for name in model.inputs:
        if name.startswith("input_ids"):
            batch[name] = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
        elif name.startswith("attention_mask"):
            batch[name] = torch.ones(batch_size, seq_len, dtype=torch.long)
        else:
            batch[name] = torch.zeros(batch_size, seq_len, dtype=torch.long)
    return batch


def _threads(model: ExportedModel) -> int:
    if model.runtime == "onnx":
        n = model.network.get_session_options().intra_op_num_threads
        return int(n) or torch.get_num_threads()  # 0: onnxruntime's default (all cores)
    return torch.get_num_threads()


def benchmark(model: ExportedModel, batch_sizes: Sequence[int] = (1, 32), seq_len: int = 128,
              repeats: int = 10, warmup: int = 3) -> list[dict[str, Any]]:
    """CPU latency of one forward pass per batch size: median and p90 over ``repeats``
    timed runs after ``warmup`` untimed ones, and throughput (sequences/s at the median)."""
    from nas.timing import time_call

    results = []
    for bs in batch_sizes:
        batch = random_batch(model, bs, seq_len)
        timing = time_call(lambda b=batch: model(b), warmup, repeats)
        median, p90 = timing.median_ms, timing.p90_ms
        results.append({"batch_size": bs, "seq_len": seq_len, "runtime": model.runtime,
                        "median_ms": median, "p90_ms": p90, "repeats": repeats,
                        "throughput_per_s": bs / (median / 1000.0),
                        "threads": _threads(model)})
    return results


__all__ = ["ExportedModel", "benchmark", "build_network", "load", "load_state", "read_config"]
