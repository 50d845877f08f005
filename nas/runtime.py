"""The standalone runtime: load an exported model directory and run it (one readable
file that imports no search code: transformers' "one model, one file").

An export directory (written by :mod:`nas.export`) holds

* ``config.json`` -- the space it came from (name and configuration, for the record), the
  architecture, the **resolved child graph** (:func:`nas.graph.to_json`), the label names,
  the model's input names and the tokenizer settings;
* ``model.safetensors`` -- the child's weights under their graph names;
* ``model.onnx`` (``--format onnx``) -- the same network for onnxruntime; int8 with
  ``--quantize int8`` (``quantization`` in ``config.json``), and then the only model the
  export answers with (:func:`load`'s ``auto``);
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

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import torch

from nas.errors import ExportError, NasError

if TYPE_CHECKING:
    from nas.network import GraphNet

FORMAT = "nas-export"
FORMAT_VERSION = 2  # 2: config.json lists every file with its size and SHA-256
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ONNX_FILE = "model.onnx"
#: The model card (:mod:`nas.model_card`): documentation, left out of the file list.
CARD_FILE = "README.md"
#: ``auto``: ``onnx`` for an int8 export (:func:`is_int8`), else ``torch``.
RUNTIMES = ("auto", "torch", "onnx")
#: config.json's record of an int8 ``model.onnx`` (``nas_quantization`` in a transformers
#: config): :mod:`nas.quantize`.
QUANTIZATION_KEY = "quantization"
#: what ``text_input`` in config.json records: one text per example, or a pair
TEXT_INPUTS = ("single", "pair")
#: Examples per forward pass of :meth:`ExportedModel.predict` (one token length each).
PREDICT_BATCH_SIZE = 64
#: A benchmark row whose IQR exceeds this fraction of its median is flagged as noisy.
NOISY_IQR = 0.10


def read_config(directory: str | Path) -> dict[str, Any]:
    """``config.json`` of an export directory, checked for the keys the runtime needs."""
    path = Path(directory) / CONFIG_FILE
    if not Path(directory).is_dir():
        raise ExportError(f"{directory}: no such export directory")
    if not path.is_file():
        raise ExportError(f"{path}: missing; not an exported model directory (run nas export)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ExportError(f"{path}: not UTF-8 text (byte {err.start}); the file is damaged, "
                          "re-export") from None
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
        version = config.get("format_version", 0)
        if not _is_int(version):
            raise ExportError(f"{path}: format_version must be an integer, got {version!r}")
        if version > FORMAT_VERSION:
            raise ExportError(f"{path}: format_version {version} is newer than this runtime's "
                              f"({FORMAT_VERSION}); upgrade the nas package")
        _check_native(config, path)
    else:
        _check_hf(config, path)
    return config


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_native(config: Mapping[str, Any], path: Path) -> None:
    """The values of a native ``config.json``, checked before anything is built from them
    (a hand-edited file must fail here, in one line, not deep inside a forward pass)."""
    labels = config["labels"]
    if (not isinstance(labels, list) or not labels
            or not all(isinstance(x, str) and x for x in labels)):
        raise ExportError(f"{path}: labels must be a non-empty list of names, got {labels!r}")
    if len(set(labels)) != len(labels):
        raise ExportError(f"{path}: labels must be distinct, got {labels!r}")
    if "num_labels" in config and config["num_labels"] != len(labels):
        raise ExportError(f"{path}: num_labels is {config['num_labels']!r} but {len(labels)} "
                          "labels are listed")
    _check_label_keys(config, path)
    inputs = config["inputs"]
    if (not isinstance(inputs, list) or not inputs
            or not all(isinstance(x, str) and x for x in inputs)):
        raise ExportError(f"{path}: inputs must be a non-empty list of input names, got "
                          f"{inputs!r}")
    if not isinstance(config["graph"], dict):
        raise ExportError(f"{path}: graph must be a JSON object (the resolved child graph)")
    vocab = config.get("vocab_size")
    if vocab is not None and (not _is_int(vocab) or vocab < 1):
        raise ExportError(f"{path}: vocab_size must be a positive integer, got {vocab!r}")
    _check_tokenizer_settings(config.get("tokenizer"), path, "tokenizer")
    head = config.get("head")
    if head is not None:
        n = head.get("num_intents") if isinstance(head, dict) else None
        if (not isinstance(head, dict) or head.get("kind") != "joint" or not _is_int(n)
                or not 0 < n < len(labels)):
            raise ExportError(f"{path}: head must be {{\"kind\": \"joint\", \"num_intents\": "
                              f"I, ...}} with 0 < I < {len(labels)} labels, got {head!r}")


def _check_hf(config: Mapping[str, Any], path: Path) -> None:
    """The settings of a ``--format hf`` export this engine reads itself."""
    _check_label_keys(config, path)
    vocab = config.get("vocab_size")
    if vocab is not None and (not _is_int(vocab) or vocab < 1):
        raise ExportError(f"{path}: vocab_size must be a positive integer, got {vocab!r}")
    _check_tokenizer_settings(config.get("nas_tokenizer"), path, "nas_tokenizer")


def label_names(config: Mapping[str, Any]) -> list[str]:
    """An export's label names in class order: ``id2label``'s, the key stock
    ``transformers`` pipelines read, so that ``nas predict``/``nas evaluate`` and the stock
    pipeline cannot name a class differently; ``labels`` for a native export written
    before ``id2label`` was (:func:`read_config` refuses keys that disagree)."""
    id2label = config.get("id2label")
    if id2label:
        return [id2label[str(i)] for i in range(len(id2label))]
    return list(config.get("labels") or [])


def _check_label_keys(config: Mapping[str, Any], path: Path) -> None:
    """``id2label`` (ids 0..N-1 to distinct names), ``label2id`` and a native export's
    ``labels`` must name the classes alike: an edit to one of them alone (``labels``
    reversed) would make this engine and a stock pipeline answer with different names."""
    id2label = config.get("id2label")
    names: list[str] | None = None
    if id2label is not None:
        if not isinstance(id2label, dict) or not id2label:
            raise ExportError(f"{path}: id2label must be a non-empty mapping, got {id2label!r}")
        ids = [str(i) for i in range(len(id2label))]
        if sorted(id2label) != sorted(ids):
            raise ExportError(f"{path}: id2label's keys must be the class ids 0..{len(ids) - 1}, "
                              f"got {sorted(id2label)}; re-export the model")
        names = [id2label[i] for i in ids]
        if not all(isinstance(x, str) and x for x in names) or len(set(names)) != len(names):
            raise ExportError(f"{path}: id2label must map each id to a distinct name, got "
                              f"{id2label!r}; re-export the model")
    labels = config.get("labels")
    if names is not None and labels is not None and labels != names:
        raise ExportError(f"{path}: the keys labels {labels} and id2label {names} disagree; "
                          "make them name the classes alike (id2label is the one stock "
                          "transformers reads), or re-export the model")
    label2id = config.get("label2id")
    known = names if names is not None else labels
    if label2id is not None and known is not None and label2id != {
            name: i for i, name in enumerate(known)}:
        source = "id2label" if names is not None else "labels"
        raise ExportError(f"{path}: the keys label2id {label2id} and {source} {known} disagree; "
                          f"make label2id map each name of {source} to its id, or re-export "
                          "the model")


def _check_tokenizer_settings(settings: Any, path: Path, key: str) -> None:
    if settings is None:
        return
    if not isinstance(settings, dict):
        raise ExportError(f"{path}: {key} must be a JSON object or null, got {settings!r}")
    length = settings.get("max_length", 128)
    if not _is_int(length) or length < 1:
        raise ExportError(f"{path}: {key}.max_length must be a positive integer, got "
                          f"{length!r}")
    if not isinstance(settings.get("separate_pair", False), bool):
        raise ExportError(f"{path}: {key}.separate_pair must be true or false")
    files = settings.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ExportError(f"{path}: {key}.files must be a list of file names")


MANIFEST_KEY = "files"  # native exports; an hf export keeps it under "nas_files"
TRIM_KEY = "vocab_trim"  # a trimmed export's record (nas.vocab_trim); hf: "nas_vocab_trim"


def file_manifest(directory: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of every file of an export directory except ``config.json`` and
    the model card (a card edited for the Hub does not make the weights suspect)."""
    import hashlib

    manifest = {}
    for path in sorted(p for p in directory.iterdir()
                       if p.is_file() and p.name not in (CONFIG_FILE, CARD_FILE)):
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
    settings = config.get("tokenizer") if config.get("format") == FORMAT \
        else config.get("nas_tokenizer")
    needed = [WEIGHTS_FILE, *((settings or {}).get("files") or [])]
    unlisted = [n for n in needed if n in actual and n not in manifest]
    if unlisted:
        raise ExportError(f"{directory / unlisted[0]}: used by the export but not in the file "
                          f"list of {CONFIG_FILE}; re-export")
    for name, want in manifest.items():
        if name not in actual:
            raise ExportError(f"{directory / name}: missing (the export lists it); copy the "
                              "whole export directory or re-export")
        if not isinstance(want, dict) or actual[name] != {"size": want.get("size"),
                                                          "sha256": want.get("sha256")}:
            raise ExportError(f"{directory / name}: changed since the export was written "
                              "(size or SHA-256 differs); re-export")


def build_network(config: Mapping[str, Any], source: str = CONFIG_FILE) -> GraphNet:
    """The child network of an export config, with freshly initialised weights."""
    from nas.graph import from_json
    from nas.network import GraphNet

    try:
        graph = from_json(config["graph"])
    except NasError as err:
        raise ExportError(f"{source}: bad graph: {err}") from None
    except Exception as err:  # networkx fails in many ways on malformed node-link data
        raise ExportError(f"{source}: the graph is malformed ({_brief(err)})") from err
    try:
        return GraphNet(graph, resolved=True)
    except NasError as err:
        raise ExportError(f"{source}: cannot build the graph: {err}") from None
    except Exception as err:  # an op built from malformed parameters (torch, int(), ...)
        raise ExportError(f"{source}: an op's parameters are missing or malformed "
                          f"({_brief(err)})") from err


def _brief(err: BaseException) -> str:
    """An exception as one short line: its type and the start of its message."""
    message = " ".join(str(err).split())
    return f"{type(err).__name__}: {message[:200]}" if message else type(err).__name__


@torch.no_grad()
def check_runs(network: torch.nn.Module, inputs: Sequence[str], source: str) -> None:
    """One forward pass on a two-token input: a config whose graph builds but cannot run
    (a parameter of the wrong type, widths that do not meet) fails here, at load time, in
    one line, instead of at the first prediction."""
    batch = {name: (torch.ones if name.startswith("attention_mask") else torch.zeros)(
        1, 2, dtype=torch.long) for name in inputs}  # id 0 exists in every vocabulary
    was_training = network.training
    network.eval()
    try:
        network(batch)
    except Exception as err:  # any op may fail on malformed parameters
        raise ExportError(f"{source}: the model in it cannot run ({_brief(err)}); the file is "
                          "damaged, re-export") from err
    finally:
        network.train(was_training)


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
        #: where the torch runtime computes (:func:`load`'s ``device``); ONNX: the CPU
        self.device = torch.device("cpu")

    # ------------------------------------------------------------------ facts
    @property
    def is_hf(self) -> bool:
        return self.config.get("format") != FORMAT

    @property
    def random_init(self) -> bool:
        """Whether the export holds untrained weights (``nas export --random-init``)."""
        return bool(self.config.get("random_init", False))

    @property
    def labels(self) -> list[str]:
        if self.is_hf and self.runtime == "onnx":
            n = len(self.config.get("id2label") or {}) or int(self.config.get("num_labels", 2))
            return label_names(self.config) or [f"LABEL_{i}" for i in range(n)]
        if self.is_hf:  # transformers leaves default names out of config.json
            id2label = self.network.config.id2label
            return [id2label[k] for k in sorted(id2label, key=int)]
        return label_names(self.config)

    @property
    def task(self) -> str | None:
        """The task the export was trained on, as recorded (``None``: not recorded)."""
        task = self.config.get("task")
        return task if isinstance(task, str) and task else None

    @property
    def text_input(self) -> str | None:
        """``"single"`` or ``"pair"``: how many texts one example of the model is, as the
        export records it (``text_input``), else as its inputs (separate pair inputs) or its
        registered task say; ``None`` when nothing tells."""
        recorded = self.config.get("nas_text_input" if self.is_hf else "text_input")
        if recorded in TEXT_INPUTS:
            return str(recorded)
        if "input_ids_b" in self.inputs:
            return "pair"
        from nas.data.tasks import TASKS

        spec = TASKS.get(self.task) if self.task is not None and self.task in TASKS else None
        return spec.kind if spec is not None and spec.kind in TEXT_INPUTS else None

    def check_texts(self, texts_a: Sequence[str], texts_b: Sequence[str] | None) -> None:
        """Refuse texts the model cannot score meaningfully: bytes that are not UTF-8 (the
        tokenizer would fail with a TypeError), a second text for a single-text model (it
        would silently change the answer), one text for a pair model."""
        for text in (*texts_a, *(texts_b or ())):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                bad = ord(text[err.start]) & 0xFF  # a surrogate-escaped byte of argv
                raise NasError(f"text {text.encode('utf-8', 'replace').decode()[:40]!r}: not "
                               f"UTF-8 (byte 0x{bad:02x} at position {err.start}); pass the "
                               "text as UTF-8") from None
        kind = self.text_input
        what = f"the model in {self.directory}" + (f" (task {self.task})" if self.task else "")
        if kind == "single" and texts_b is not None:
            raise NasError(f"{what} reads one text, got a second; pass one text, or use a "
                           "sentence-pair model")
        if kind == "pair" and texts_b is None:
            raise NasError(f"{what} reads a pair of texts, got one; pass both texts")

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
    def max_positions(self) -> int | None:
        """The longest input the model reads (its position table), ``None`` if unlimited."""
        if self.is_hf:
            n = self.config.get("max_position_embeddings")
            return n if _is_int(n) and n > 0 else None
        from nas.graph import position_limit

        return position_limit(self.network.graph) if self.runtime == "torch" else \
            position_limit(_graph_of(self.config))

    @property
    def vocab_size(self) -> int:
        if self.is_hf:
            return int(self.config["vocab_size"])
        if self.config.get("vocab_size"):
            return int(self.config["vocab_size"])
        graph = self.network.graph if self.runtime == "torch" else _graph_of(self.config)
        tables = _vocab_sizes(graph)
        return tables[0] if tables else 1000

    def check_seq_len(self, seq_len: int) -> None:
        """A one-line error when ``seq_len`` is beyond the model's positions."""
        from nas.graph import check_seq_len

        check_seq_len(seq_len, self.max_positions, f"the model in {self.directory}")

    # ------------------------------------------------------------------ running
    def __call__(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits ``(B, num_labels)`` for a batch of id tensors ``(B, L)``."""
        feed = {k: batch[k] for k in self.inputs if k in batch}
        if self.runtime == "torch" and self.device.type != "cpu":
            feed = {k: v.to(self.device) for k, v in feed.items()}
        if self.runtime == "onnx":
            ids = feed["input_ids"]
            # an input the caller's batch lacks is what the tokenizer means by leaving it
            # out: no token types (zeros), nothing masked (ones)
            arrays = {n: (feed[n] if n in feed else (torch.ones_like if n.startswith(
                "attention_mask") else torch.zeros_like)(ids)).cpu().numpy().astype("int64")
                for n in (i.name for i in self.network.get_inputs())}
            return torch.from_numpy(self.network.run(None, arrays)[0])
        with torch.no_grad():
            if self.is_hf:
                return self.network(**feed).logits
            return self.network(feed).logits

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            files = ("tokenizer.json", "vocab.txt")
            if (not self.is_hf and not self.config.get("tokenizer")) or not any(
                    (self.directory / f).is_file() for f in files):
                # transformers would build an empty vocabulary and answer from [UNK]s
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

    @property
    def head(self) -> dict[str, Any] | None:
        """How to read the output: ``None`` (a classifier) or a joint intent + slot head."""
        return None if self.is_hf else self.config.get("head")

    def predict_slots(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """A joint intent + slot model on whitespace-split words
        (docs/reference.md#mixed-vocabulary): per text ``{"intent", "intent_probability",
        "probabilities", "words", "tags", "slots"}``, each word tagged at its first piece, ``slots``
        the IOB chunks (:func:`nas.tagging.slot_spans`)."""
        from nas.tagging import first_piece_positions, slot_spans

        head = self.head
        if head is None:
            raise ExportError(f"{self.directory}: not a tagging model (no joint head)")
        words = [t.split() for t in texts]
        if not all(words):
            raise ExportError("every text needs at least one word to tag")
        length = int(self.tokenizer_settings.get("max_length", 128))
        enc = self.tokenizer(words, is_split_into_words=True, max_length=length,
                             truncation=True, padding="longest", return_tensors="pt",
                             return_token_type_ids=True)
        logits = self({k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
        n = int(head["num_intents"])
        labels = self.labels
        intents, tag_names = labels[:n], labels[n:]
        probs = torch.softmax(logits[:, 0, :n].float(), dim=-1)
        tags = logits[:, :, n:].argmax(-1)
        out = []
        for b, ws in enumerate(words):
            first = first_piece_positions(enc.word_ids(b), len(ws))
            seq = [tag_names[int(tags[b, p])] if p >= 0 else "O" for p in first]
            best = int(torch.argmax(probs[b]))
            out.append({"intent": intents[best], "intent_probability": float(probs[b, best]),
                        "probabilities": {intents[i]: float(p) for i, p in enumerate(probs[b])},
                        "words": ws, "tags": seq, "slots": slot_spans(ws, seq)})
        return out

    def token_lengths(self, texts_a: Sequence[str], texts_b: Sequence[str] | None = None
                      ) -> list[int]:
        """Each example's token count as :meth:`encode` (or, for a tagging model,
        :meth:`predict_slots`) cuts it, before padding: what :meth:`predict` groups by."""
        length = int(self.tokenizer_settings.get("max_length", 128))
        if self.head is not None:
            enc = self.tokenizer([t.split() for t in texts_a], is_split_into_words=True,
                                 max_length=length, truncation=True)
        else:
            enc = self.tokenizer(list(texts_a), list(texts_b) if texts_b is not None else None,
                                 max_length=length,
                                 truncation=True if texts_b is None else "longest_first")
        return [len(ids) for ids in enc["input_ids"]]

    def predict(self, texts_a: Sequence[str], texts_b: Sequence[str] | None = None,
                batch_size: int = PREDICT_BATCH_SIZE) -> list[dict[str, Any]]:
        """``[{"label": name, "probabilities": {name: p}}]``, one per example, in order (a
        joint intent + slot model: :meth:`predict_slots`, with ``label`` the intent).

        The way to score many texts: examples run ``batch_size`` at a time, each batch
        holding texts of one token length (:func:`length_batches`), so no text is padded
        and every answer is the one the text gets scored alone (AdaBERT's convolutions,
        for one, see padding: docs/exports.md).
        """
        self.check_texts(texts_a, texts_b)
        if not _is_int(batch_size) or batch_size < 1:
            raise NasError(f"batch size must be a positive integer, got {batch_size!r}")
        if self.head is not None:
            if texts_b is not None:
                raise ExportError(f"{self.directory}: a tagging model reads one text, not a pair")
            if not all(t.split() for t in texts_a):
                raise ExportError("every text needs at least one word to tag")
        if not texts_a:
            return []
        out: list[dict[str, Any]] = [{} for _ in texts_a]
        for rows in length_batches(self.token_lengths(texts_a, texts_b), batch_size):
            a = [texts_a[i] for i in rows]
            b = [texts_b[i] for i in rows] if texts_b is not None else None
            for i, result in zip(rows, self._predict_batch(a, b), strict=True):
                out[i] = result
        return out

    def predict_stream(self, examples: Iterable[tuple[str, str | None]],
                       batch_size: int = PREDICT_BATCH_SIZE, chunk_size: int | None = None
                       ) -> Iterator[dict[str, Any]]:
        """:meth:`predict` over ``(text, second text or None)`` pairs read lazily (a file
        of any length), yielding each answer in input order; ``chunk_size`` examples
        (default ``16 * batch_size``) are held at a time, sorted by length within them."""
        size = chunk_size or 16 * batch_size
        chunk: list[tuple[str, str | None]] = []
        for example in examples:
            chunk.append(example)
            if len(chunk) >= size:
                yield from self._predict_chunk(chunk, batch_size)
                chunk = []
        if chunk:
            yield from self._predict_chunk(chunk, batch_size)

    def _predict_chunk(self, chunk: Sequence[tuple[str, str | None]], batch_size: int
                       ) -> list[dict[str, Any]]:
        pairs = [b for _, b in chunk]
        if any(b is None for b in pairs) and any(b is not None for b in pairs):
            raise NasError("some examples have a second text and some do not; give every "
                           "example both texts, or none")
        texts_b = None if pairs[0] is None else [str(b) for b in pairs]
        return self.predict([a for a, _ in chunk], texts_b, batch_size)

    def _predict_batch(self, texts_a: Sequence[str], texts_b: Sequence[str] | None
                       ) -> list[dict[str, Any]]:
        """One forward pass over the texts (padded to the longest), read as answers."""
        if self.head is not None:
            return [{"label": r["intent"], **r} for r in self.predict_slots(texts_a)]
        logits = self(self.encode(texts_a, texts_b))
        probs = torch.softmax(logits.float(), dim=-1)
        labels = self.labels
        out = []
        for row in probs:
            best = int(torch.argmax(row))
            out.append({"label": labels[best],
                        "probabilities": {labels[i]: float(p) for i, p in enumerate(row)}})
        return out


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """The indices of ``lengths`` in batches of at most ``batch_size`` that share one
    length, shortest first, file order within a length: a batch needs no padding, so a
    model that sees padding (a convolution over the sequence) answers as it does for
    each text alone, and short texts do not pay for long ones."""
    by_length: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_length.setdefault(n, []).append(i)
    return [rows[start:start + batch_size] for _, rows in sorted(by_length.items())
            for start in range(0, len(rows), batch_size)]


def load(directory: str | Path, runtime: str = "auto", threads: int | None = None,
         device: str = "cpu") -> ExportedModel:
    """Load an export directory with the ``torch`` or ``onnx`` runtime; ``auto``
    (default): ``onnx`` for an int8 export (whose ``model.safetensors`` holds the fp32
    weights it was quantised from, never what it answers with), else ``torch``.

    ``threads`` sets the intra-op threads of either runtime (default: the library's own).
    On a shared machine one thread is often faster than several competing ones.
    ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``: :mod:`nas.device`) is where the
    torch runtime computes; the model's logits stay there, :meth:`ExportedModel.predict`
    returns plain numbers. ONNX Runtime runs on the CPU here.
    """
    from nas.device import place, resolve_device

    if runtime not in RUNTIMES:
        raise ExportError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    if runtime == "auto":
        # an int8 export answers from the graph it ships, on the CPU
        runtime = "onnx" if is_int8(directory) else "torch"
        device = "cpu" if runtime == "onnx" else device
    where = resolve_device(device)
    if runtime == "onnx" and where.type != "cpu":
        raise ExportError(f"device {device}: the onnx runtime runs on the CPU here (no "
                          "onnxruntime-gpu); use --runtime torch on a GPU")
    loaded = _load(directory, runtime, threads)
    if runtime == "torch":
        loaded.network = place(loaded.network, where)
        loaded.device = where
    return loaded


def quantization(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record of an int8 ``model.onnx`` in an export's config, ``None`` if fp32."""
    record = config.get(QUANTIZATION_KEY if config.get("format") == FORMAT
                        else f"nas_{QUANTIZATION_KEY}")
    return record if isinstance(record, dict) else None


def is_int8(directory: str | Path) -> bool:
    """Whether the export in ``directory`` ships an int8 ``model.onnx``."""
    return quantization(read_config(directory)) is not None


def load_fp32(directory: str | Path) -> ExportedModel:
    """The torch network of an export with its fp32 weights, int8 or not: what a
    conversion re-exports (never what ``nas predict`` answers an int8 export with)."""
    return _load(directory, "torch", None, fp32=True)


def _load(directory: str | Path, runtime: str, threads: int | None, fp32: bool = False
          ) -> ExportedModel:
    """:func:`load` on the CPU; ``fp32``: an int8 export's fp32 weights (a conversion)."""
    if threads and runtime == "torch":
        torch.set_num_threads(int(threads))
    directory = Path(directory)
    config = read_config(directory)
    verify_files(directory, config)
    if runtime == "torch" and not fp32 and quantization(config) is not None:
        raise ExportError(f"{directory}: an int8 export answers from {ONNX_FILE}; use "
                          f"--runtime onnx (or auto): {WEIGHTS_FILE} holds the fp32 weights "
                          "it was quantised from, not the model it ships")
    if runtime == "onnx":
        return _checked(ExportedModel(directory, config, runtime,
                                      _onnx_session(directory, threads)))
    if config.get("format") != FORMAT:  # a --format hf directory
        _check_hf_head(directory, config)
        return _checked(ExportedModel(directory, config, runtime, _load_hf(directory).eval()))
    network = build_network(config, str(directory / CONFIG_FILE))
    tables = _vocab_sizes(network.graph)
    if config.get("vocab_size") is not None and tables and config["vocab_size"] != tables[0]:
        raise ExportError(f"{directory / CONFIG_FILE}: vocab_size is {config['vocab_size']} but "
                          f"the model's embedding table has {tables[0]} rows")
    heads = int(network.graph.nodes[network.outputs[0]].get("width", 0))
    if heads != len(label_names(config)):
        raise ExportError(f"{directory / CONFIG_FILE}: {len(label_names(config))} labels for a "
                          f"model with {heads} outputs; the label list does not fit the head")
    path = directory / WEIGHTS_FILE
    load_state(network, read_weights(path), str(path))
    check_runs(network, config["inputs"], str(directory / CONFIG_FILE))
    return _checked(ExportedModel(directory, config, runtime, network.eval()))


def _onnx_session(directory: Path, threads: int | None) -> Any:
    """An ONNX Runtime session of the export's ``model.onnx`` on the CPU."""
    path = directory / ONNX_FILE
    if not path.is_file():
        raise ExportError(f"{path}: missing; export with --format onnx to run on onnxruntime")
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = int(threads)
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own untyped errors
        raise ExportError(f"{path}: onnxruntime cannot load it ({err})") from None


def _checked(model: ExportedModel) -> ExportedModel:
    """Refuse a tokenizer length beyond the model's position table: an edited
    ``max_length`` would otherwise fail at the first long text with a tensor size
    mismatch."""
    length = model.tokenizer_settings.get("max_length")
    limit = model.max_positions
    if _is_int(length) and limit is not None and length > limit:
        key = "nas_tokenizer" if model.is_hf else "tokenizer"
        raise ExportError(f"{model.directory / CONFIG_FILE}: {key}.max_length is {length}, "
                          f"beyond the model's {limit} positions; set it to at most {limit} "
                          "(the length the model was trained at), or re-export")
    return model


def _vocab_sizes(graph: Any) -> list[int]:
    """The sizes of the graph's token-embedding tables."""
    return [attrs["params"]["vocab_size"] for _, attrs in graph.nodes(data=True)
            if "vocab_size" in attrs.get("params", {})]


def _graph_of(config: Mapping[str, Any]) -> Any:
    from nas.graph import from_json

    return from_json(config["graph"])


def _check_hf_head(directory: Path, config: Mapping[str, Any]) -> None:
    """The label names of an hf export must fit its classifier (transformers would fail with
    a report of many lines, or with a mismatch allowed, answer with random weights)."""
    from safetensors import SafetensorError, safe_open

    id2label = config.get("id2label")
    path = directory / WEIGHTS_FILE
    if not id2label or not path.is_file():
        return
    try:
        with safe_open(str(path), framework="pt") as f:
            if "classifier.weight" not in f.keys():  # noqa: SIM118 (not a dict)
                return
            outputs = f.get_slice("classifier.weight").get_shape()[0]
    except (SafetensorError, OSError) as err:
        raise ExportError(f"{path}: not a readable safetensors file ({err})") from None
    if outputs != len(id2label):
        raise ExportError(f"{directory / CONFIG_FILE}: {len(id2label)} labels (id2label) for a "
                          f"classifier with {outputs} outputs; the label list does not fit "
                          "the head")


def _load_hf(directory: Path) -> Any:
    """``transformers`` loading, quiet (no progress bar, no multi-line report) and with any
    failure as one ExportError line."""
    from transformers import AutoModelForSequenceClassification

    from nas.hf import quiet_transformers

    try:
        with quiet_transformers():
            return AutoModelForSequenceClassification.from_pretrained(
                str(directory), local_files_only=True)
    except Exception as err:  # transformers and safetensors raise many kinds
        message = " ".join(str(err).split()) or type(err).__name__
        raise ExportError(f"{directory}: transformers cannot load it ({message[:300]})") \
            from None


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
    """Latency of one forward pass per batch size on the model's device (CPU, or a GPU
    timed with CUDA events: :func:`nas.timing.time_call`): median, p90 and interquartile range
    over ``repeats`` timed runs after ``warmup`` untimed ones, and throughput (sequences/s at
    the median). ``noisy`` marks a row whose IQR exceeds ``NOISY_IQR`` of the median: the
    machine was busy and the number should not be compared."""
    from nas.device import to_device
    from nas.timing import time_call

    model.check_seq_len(seq_len)
    results = []
    for bs in batch_sizes:  # on the model's device before the clock starts
        batch = to_device(random_batch(model, bs, seq_len), model.device)
        timing = time_call(functools.partial(model, batch), warmup, repeats,
                           device=model.device)
        median, p90 = timing.median_ms, timing.p90_ms
        results.append({"batch_size": bs, "seq_len": seq_len, "runtime": model.runtime,
                        "median_ms": median, "p90_ms": p90, "iqr_ms": timing.iqr_ms,
                        "noisy": timing.iqr_ms > NOISY_IQR * median, "repeats": repeats,
                        "throughput_per_s": bs / (median / 1000.0),
                        "threads": _threads(model),
                        **({"device": str(model.device)} if model.device.type != "cpu"
                           else {})})
    return results


def runtime_name(model: ExportedModel) -> str:
    """The name a timing of ``model`` is recorded under (:mod:`nas.timing`): what runs it
    and in which precision (``torch-fp32``, ``onnx-fp32``, ``onnx-int8``)."""
    int8 = model.runtime == "onnx" and quantization(model.config) is not None
    return f"{model.runtime}-{'int8' if int8 else 'fp32'}"


def timed_callable(model: ExportedModel) -> Callable[[Mapping[str, torch.Tensor]], object]:
    """What the timing protocol runs for an export, in one implementation for teacher and
    student alike: under torch, the engine's graph (a native export's network; a stock
    ``transformers`` BERT loaded into the engine's ``bert`` design, as a run times its
    teacher; a remote-code export runs the engine's bundled graph); under ONNX Runtime,
    its session. A trimmed export (:mod:`nas.vocab_trim`) reads the ids of the batch it
    is timed on modulo its own vocabulary: timed against its teacher it gets the
    teacher's ids, and a table lookup costs the same whatever the id (one elementwise
    op added, microseconds against milliseconds)."""
    call = _timed_graph(model)
    if TRIM_KEY in model.config or f"nas_{TRIM_KEY}" in model.config:
        return _OwnIds(call, model.vocab_size)
    return call


class _OwnIds:
    """A timed callable whose batch's ids are taken modulo ``vocab`` (a trimmed export
    timed on another vocabulary's tokens)."""

    def __init__(self, call: Callable[[Mapping[str, torch.Tensor]], object], vocab: int
                 ) -> None:
        self.call = call
        self.vocab = vocab

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> object:
        return self.call({k: v % self.vocab if k.startswith("input_ids") else v
                          for k, v in batch.items()})


def _timed_graph(model: ExportedModel) -> Callable[[Mapping[str, torch.Tensor]], object]:
    if model.runtime != "torch":
        return model
    if not model.is_hf:
        return model.network.eval()
    from nas.device import place
    from nas.hf import load_teacher_as_design

    try:
        return place(load_teacher_as_design(model.directory)[1], model.device)
    except ExportError:  # not a stock BERT: the engine code bundled with it
        return model


def benchmark_pair(model: ExportedModel, against: ExportedModel,
                   batch_sizes: Sequence[int] = (1, 32), seq_len: int = 128, repeats: int = 10,
                   warmup: int = 3) -> list[dict[str, Any]]:
    """``model``'s speed-up over ``against`` (a teacher) per batch size by the one timing
    protocol (:func:`nas.timing.time_pair`: interleaved rounds on the same random batch,
    the per-round ratio's median and interquartile range, ``noisy`` when the timings'
    spread is larger than their difference), both in ``model``'s runtime."""
    from nas.device import to_device
    from nas.timing import time_pair

    for one in (model, against):
        one.check_seq_len(seq_len)
    student, teacher = timed_callable(model), timed_callable(against)
    vocab = min(model.vocab_size, against.vocab_size, 30000)
    rows = []
    for bs in batch_sizes:
        batch = {**random_batch(against, bs, seq_len), **random_batch(model, bs, seq_len)}
        batch = to_device({k: v % vocab if k.startswith("input_ids") else v
                           for k, v in batch.items()}, model.device)
        with torch.no_grad():
            result = time_pair(teacher, student, [batch], repeats, warmup=warmup,
                               runtime=runtime_name(model), device=model.device)
        rows.append({"batch_size": bs, "seq_len": seq_len, **result.to_dict()})
    return rows


__all__ = ["PREDICT_BATCH_SIZE", "ExportedModel", "benchmark", "benchmark_pair",
           "build_network", "is_int8", "label_names", "length_batches", "load", "load_fp32",
           "load_state", "quantization", "read_config", "runtime_name", "timed_callable"]
