"""Trimmed vocabularies: an export keeps only the word pieces its task's texts use.

Half of the default teacher's 22.7M parameters are its 30,522-row embedding table, which
no search space shrinks; a student that inherits it is "smaller" mostly on paper.
Vocabulary trimming (Ushio, Zhou, Camacho-Collados 2023, "An Efficient Multilingual
Language Model Compression through Vocabulary Trimming"; TextPruner's vocabulary
pruning, Yang et al. 2022; docs/reference.md#sources) keeps the pieces that occur in the
task's training texts plus the special tokens, and drops the other embedding rows.

:func:`trim_folder` rewrites an export folder in place (native or stock ``transformers``
layout), consistently:

* the embedding rows (``*word_embeddings.weight``) and any tied output rows
  (``*decoder.weight`` / ``*decoder.bias`` of vocabulary length) of ``model.safetensors``;
* ``vocab.txt`` and ``tokenizer.json`` (the WordPiece model's vocabulary, the added
  tokens, the post-processor's special ids, the padding id) and ``tokenizer_config.json``'s
  ``added_tokens_decoder``, with new ids contiguous in the old order;
* ``config.json``: every ``vocab_size`` of the old size (the graph's embedding node, the
  space's configuration, the hyperparameters, a stock config) and every ``*_token_id``.

So a stock export stays stock, and any text made only of kept pieces gets the same ids'
rows, hence the same logits (WordPiece's greedy longest match picks, within the kept
pieces, the piece it picked before: that piece is kept, and every longer one was absent
before too). A word with a dropped piece is split again from the kept pieces where
longest match can, else it becomes ``[UNK]``. Only WordPiece tokenizers are trimmed: a
BPE or Unigram vocabulary also has merges or scores tied to the pieces, which this does
not rewrite. The ONNX graph, if any, is traced again by :mod:`nas.export`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nas.errors import ExportError
from nas.runtime import TRIM_KEY  # config.json's record (nas_vocab_trim in a transformers one)

TOKENIZER_JSON = "tokenizer.json"
VOCAB_TXT = "vocab.txt"
#: Tensors read by token id: the embedding tables and, in a tied masked-LM head, the
#: output rows (BERT's ``cls.predictions.decoder``).
ROW_TABLES = ("word_embeddings.weight",)
TIED_OUTPUTS = ("decoder.weight", "decoder.bias")


@dataclass(frozen=True)
class TrimTexts:
    """What a trimmed export keeps and is measured on: ``texts`` (the task's train texts,
    both sides of a pair; a ``transfer:`` block's texts join them when it exists),
    ``source`` (what they are, for the record) and ``report`` (a
    :class:`nas.quantize.DevSet` of the report split, or ``None``: not measured)."""

    texts: Sequence[str]
    source: str = "train"
    report: Any = None
    split: str = "test"


def task_trim(train: Any, report: Any, split: str, metric: str,
              transfer: Sequence[str] = ()) -> TrimTexts:
    """What a run's export keeps: the pieces of the task's whole train split (both texts
    of a pair), scored on the run's ``report`` rows (class indices, as the run scored).
    ``transfer``: the texts of a ``transfer:`` block, when a run has one (none does yet):
    a model distilled on them reads their pieces too, so they are kept beside train's."""
    from nas.quantize import DevSet

    texts = [*train.texts_a, *(train.texts_b or []), *transfer]
    return TrimTexts(texts, "train + transfer" if transfer else "train",
                     DevSet.of(report, metric=metric), split)


def run_trim(run_dir: Path, export_dir: Path) -> TrimTexts:
    """:func:`task_trim` for ``nas export --run RUN --trim-vocab``: the run's task, its
    report rows (``data.max_report_examples`` drawn as the run drew them), labels as
    ``export_dir``'s class indices."""
    from nas.data import load_task, report_split, resolve_task
    from nas.data.files import recorded_task
    from nas.evaluate import label_indices
    from nas.quantize import DevSet
    from nas.rundir import RunDir
    from nas.runtime import label_names, read_config
    from nas.seeding import REPORT_SAMPLE_STAGE, sample_rows

    run = RunDir(run_dir)
    task = resolve_task(recorded_task(run.config.get("task"), run_dir))
    split = report_split(task)
    report = load_task(task, split)
    rows = sample_rows(len(report), (run.config.get("data") or {}).get("max_report_examples"),
                       int(run.config.get("seed", 0)), REPORT_SAMPLE_STAGE)
    report = report if rows is None else report.subset(rows)
    config = read_config(export_dir)
    trim = task_trim(load_task(task, "train"), report, split, report.metric)
    scored = None if config.get("head") is not None else DevSet.of(
        report, label_indices(label_names(config), report, {}, export_dir))
    return TrimTexts(trim.texts, trim.source, scored, split)


def wordpiece(folder: Path) -> dict[str, Any]:
    """The folder's ``tokenizer.json``, refused in one line unless it is WordPiece."""
    path = folder / TOKENIZER_JSON
    if not path.is_file():
        raise ExportError(f"{folder}: no tokenizer.json to trim; trim_vocab needs the export's "
                          "WordPiece tokenizer (drop trim_vocab / --trim-vocab)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        raise ExportError(f"{path}: broken JSON; export the model again") from None
    kind = (data.get("model") or {}).get("type")
    if kind != "WordPiece":
        raise ExportError(f"{path}: trim_vocab trims WordPiece tokenizers only, this one's "
                          f"model is {kind}; drop trim_vocab / --trim-vocab for this model")
    return dict(data)


def special_ids(tokenizer: Mapping[str, Any]) -> set[int]:
    """The added (special) tokens' ids and ``[UNK]``'s: always kept."""
    ids = {int(t["id"]) for t in tokenizer.get("added_tokens") or []}
    model = tokenizer["model"]
    unk = model.get("unk_token")
    if unk in model["vocab"]:
        ids.add(int(model["vocab"][unk]))
    return ids


def piece_ids(folder: Path, texts: Iterable[str]) -> list[list[int]]:
    """Each text's word-piece ids under the folder's tokenizer, no specials, untruncated."""
    from nas.tokenization import load_tokenizer

    tokenizer = load_tokenizer(folder)
    texts = list(texts)
    out: list[list[int]] = []
    for start in range(0, len(texts), 1024):
        chunk = texts[start:start + 1024]
        out += tokenizer(chunk, add_special_tokens=False, truncation=False,
                         verbose=False)["input_ids"]
    return out


def kept_ids(folder: Path, texts: Iterable[str]) -> list[int]:
    """The ids a trimmed vocabulary keeps, ascending: every piece of ``texts`` plus the
    special tokens."""
    tokenizer = wordpiece(folder)
    kept = special_ids(tokenizer)
    for ids in piece_ids(folder, texts):
        kept.update(ids)
    return sorted(kept)


def trim_folder(folder: Path, trim: TrimTexts) -> dict[str, Any]:
    """Trim the export in ``folder`` in place to the pieces of ``trim.texts``; returns the
    record that ``config.json`` keeps under ``vocab_trim`` (sizes, parameters, bytes,
    and, with ``trim.report``, the report split's score before and after, on all of it
    and on its texts with a piece absent from the kept ones)."""
    tokenizer = wordpiece(folder)
    old_size = len(tokenizer["model"]["vocab"])
    kept = kept_ids(folder, trim.texts)
    new_id = {old: new for new, old in enumerate(kept)}
    from nas.model_card import params_in

    weights = folder / "model.safetensors"
    before = {"vocab_size": old_size, "parameters": params_in(folder),
              "weights_bytes": weights.stat().st_size}
    scores = _Scores(folder, trim, set(kept))
    _trim_weights(weights, old_size, kept)
    _rewrite_tokenizer(folder, tokenizer, new_id)
    _rewrite_config(folder, old_size, new_id)
    _refresh_manifest(folder)
    after = {"vocab_size": len(kept), "parameters": params_in(folder),
             "weights_bytes": weights.stat().st_size}
    return {"texts": trim.source, "num_texts": len(trim.texts), "before": before,
            "after": after, **scores.finish(folder)}


# ---------------------------------------------------------------------------
# the files
# ---------------------------------------------------------------------------


def _trim_weights(path: Path, old_size: int, kept: Sequence[int]) -> None:
    """Keep the ``kept`` rows of every token-indexed table (refused if there is none)."""
    from safetensors import safe_open

    from nas.checkpoint import save_safetensors
    from nas.runtime import read_weights

    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    state = read_weights(path)
    index = torch.tensor(list(kept), dtype=torch.long)
    names = [n for n, t in state.items() if t.dim() >= 1 and t.shape[0] == old_size
             and n.endswith(ROW_TABLES + TIED_OUTPUTS)]
    if not any(n.endswith(ROW_TABLES) for n in names):
        raise ExportError(f"{path}: no word_embeddings table of {old_size} rows to trim; "
                          "is the tokenizer the model's own?")
    for name in names:
        state[name] = state[name].index_select(0, index).contiguous()
    save_safetensors(state, path, metadata=metadata)


def _rewrite_tokenizer(folder: Path, tokenizer: dict[str, Any], new_id: Mapping[int, int]
                       ) -> None:
    """``tokenizer.json``, ``vocab.txt`` and ``tokenizer_config.json`` with the new ids."""
    vocab = tokenizer["model"]["vocab"]
    pieces = sorted(((new_id[i], p) for p, i in vocab.items() if i in new_id))
    tokenizer["model"]["vocab"] = {p: i for i, p in pieces}
    for token in tokenizer.get("added_tokens") or []:
        token["id"] = new_id[int(token["id"])]
    if isinstance(tokenizer.get("padding"), dict) and "pad_id" in tokenizer["padding"]:
        tokenizer["padding"]["pad_id"] = new_id.get(int(tokenizer["padding"]["pad_id"]), 0)
    _remap_processor(tokenizer.get("post_processor"), new_id)
    (folder / TOKENIZER_JSON).write_text(json.dumps(tokenizer, ensure_ascii=False, indent=2)
                                         + "\n", encoding="utf-8")
    if (folder / VOCAB_TXT).is_file():
        (folder / VOCAB_TXT).write_text("".join(p + "\n" for _, p in pieces), encoding="utf-8")
    path = folder / "tokenizer_config.json"
    if path.is_file():
        settings = json.loads(path.read_text(encoding="utf-8"))
        decoder = settings.get("added_tokens_decoder")
        if isinstance(decoder, dict):  # transformers keys the added tokens by id
            settings["added_tokens_decoder"] = {str(new_id[int(k)]): v
                                                for k, v in decoder.items()
                                                if int(k) in new_id}
        path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


def _remap_processor(processor: Any, new_id: Mapping[int, int]) -> None:
    """The special ids a post-processor writes: TemplateProcessing's ``special_tokens``
    (``ids``), BertProcessing's ``cls`` / ``sep`` pairs, each of a ``Sequence``."""
    if not isinstance(processor, dict):
        return
    for special in (processor.get("special_tokens") or {}).values():
        special["ids"] = [new_id[int(i)] for i in special.get("ids", [])]
    for key in ("cls", "sep"):
        pair = processor.get(key)
        if isinstance(pair, list) and len(pair) == 2:
            pair[1] = new_id[int(pair[1])]
    for inner in processor.get("processors") or []:
        _remap_processor(inner, new_id)


def _rewrite_config(folder: Path, old_size: int, new_id: Mapping[int, int]) -> None:
    """Every ``vocab_size`` of the old size and every ``*_token_id`` in ``config.json``."""
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "vocab_size" and value == old_size:
                    node[key] = len(new_id)
                elif key.endswith("_token_id") and isinstance(value, int) and value in new_id:
                    node[key] = new_id[value]
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        return node

    path.write_text(json.dumps(walk(config), indent=2, default=str) + "\n", encoding="utf-8")


def _refresh_manifest(folder: Path) -> None:
    """The file list of ``config.json`` (``files``; ``nas_files`` in a ``transformers``
    config) for the rewritten files, so the folder loads again."""
    from nas.runtime import CONFIG_FILE, FORMAT, MANIFEST_KEY, file_manifest

    path = folder / CONFIG_FILE
    config = json.loads(path.read_text(encoding="utf-8"))
    key = MANIFEST_KEY if config.get("format") == FORMAT else "nas_files"
    if key in config:
        config[key] = file_manifest(folder)
        path.write_text(json.dumps(config, indent=2, default=str) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------
# the measurement
# ---------------------------------------------------------------------------


class _Scores:
    """The report split scored before trimming (at construction) and after
    (:meth:`finish`): on all of it, and on its texts holding a piece outside ``kept``
    (those the trimmed model reads differently)."""

    def __init__(self, folder: Path, trim: TrimTexts, kept: set[int]) -> None:
        self.trim = trim
        self.report = trim.report
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if config.get("head") is not None:
            self.report = None  # a tagging model is scored by spans, not classes
        if self.report is None:
            return
        texts = list(self.report.texts_a) + list(self.report.texts_b or [])
        ids = piece_ids(folder, texts)
        n = len(self.report.texts_a)
        self.unseen = [i for i in range(n)
                       if not set(ids[i]).issubset(kept)
                       or (self.report.texts_b is not None and not set(ids[n + i]) <= kept)]
        self.before = _predictions(folder, self.report)

    def finish(self, folder: Path) -> dict[str, Any]:
        if self.report is None:
            return {"report": "not measured"}
        after = _predictions(folder, self.report)
        everything = list(range(len(self.report.labels)))
        return {"report": {"split": self.trim.split, "metric": self.report.metric,
                           **_compare(self.before, after, self.report, everything)},
                "unseen_pieces": _compare(self.before, after, self.report, self.unseen)}


def _predictions(folder: Path, report: Any) -> list[int]:
    """The fp32 model's class index for each report example."""
    from nas.runtime import load_fp32

    model = load_fp32(folder)
    answers = model.predict(list(report.texts_a),
                            list(report.texts_b) if report.texts_b is not None else None)
    return [model.labels.index(a["label"]) for a in answers]


def _compare(before: Sequence[int], after: Sequence[int], report: Any,
             rows: Sequence[int]) -> dict[str, Any]:
    """The score (points) before and after on ``rows``, and how many answers changed."""
    from nas.teacher import classification_metrics, metric_score

    if not rows:
        return {"examples": 0}
    labels = [report.labels[i] for i in rows]

    def score(preds: Sequence[int]) -> float:
        picked = [preds[i] for i in rows]
        value = metric_score(classification_metrics(picked, labels, report.metric),
                             report.metric)
        return round(100.0 * value, 2)

    return {"examples": len(rows), "before": score(before), "after": score(after),
            "changed_answers": sum(before[i] != after[i] for i in rows)}


__all__ = ["TRIM_KEY", "TrimTexts", "kept_ids", "run_trim", "task_trim", "trim_folder",
           "wordpiece"]
