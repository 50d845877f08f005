"""Tokenisation: the teacher's vocabulary and a small student vocabulary.

* :func:`load_tokenizer` loads the teacher's tokenizer from a local folder (offline): BERT's,
  ELECTRA's and DistilBERT's WordPiece, RoBERTa's byte-level BPE, XLM-R's and CamemBERT's
  Unigram alike (``tests/test_hf_parity.py`` runs each through :func:`encode`);
* :func:`encode` turns texts (and pairs) into padded id tensors. For pair tasks it also
  tokenises sentence B on its own (``input_ids_b``/``attention_mask_b``, padded to the
  same length as ``input_ids``) because AdaBERT feeds A and B to the two input nodes
  separately, positions restarting for B (docs/reference.md#adabert);
* :func:`train_student_vocab` trains the ~5K WordPiece vocabulary of mixed-vocabulary
  distillation with every printable ASCII character in the alphabet, so that no word is
  out of vocabulary (docs/reference.md#mixed-vocabulary), and saves it beside the model.
"""

from __future__ import annotations

import os
import string
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.errors import DataError

# Every printable ASCII character except whitespace (which the pre-tokenizer splits on).
ASCII_ALPHABET: tuple[str, ...] = tuple(c for c in string.printable if not c.isspace())
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

if TYPE_CHECKING:  # torch is imported lazily: a teacher cache hit must not pay for it
    import torch


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The fast tokenizer saved in ``path`` (a teacher or student folder).

    Loaded with ``local_files_only``: nothing is downloaded at run time. An export folder
    whose model is remote code (``auto_map`` in ``config.json``) is read without its model
    config: ``AutoTokenizer`` would otherwise ask whether to run that code (and wait for
    an answer) although the tokenizer is a stock one.
    """
    import json

    from transformers import AutoTokenizer, PretrainedConfig

    from nas.cache import moved_hint

    p = Path(path)
    if not p.is_dir():
        raise DataError(f"tokenizer folder {p} does not exist{moved_hint(p)}")
    extra: dict[str, Any] = {}
    try:
        if "auto_map" in json.loads((p / "config.json").read_text(encoding="utf-8")):
            extra["config"] = PretrainedConfig()
    except (OSError, ValueError, TypeError):
        pass  # no (readable) model config: AutoTokenizer reads the tokenizer files alone
    try:
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True, **extra)
    except (OSError, ValueError) as e:
        raise DataError(f"{p}: cannot load a tokenizer ({e})") from e


def encode(
    tokenizer: Any,
    texts_a: Sequence[str],
    texts_b: Sequence[str] | None = None,
    max_length: int = 128,
    pad_to_max: bool = False,
    separate_b: bool = True,
) -> dict[str, torch.Tensor]:
    """Tokenise a batch into ``input_ids``, ``attention_mask``, ``token_type_ids`` (B, L).

    Pairs are joined as the tokenizer's template says (BERT's ``[CLS] a [SEP] b [SEP]``,
    RoBERTa's ``<s> a </s></s> b </s>`` with token type 0 throughout) for the teacher. With
    ``separate_b`` they are also tokenised one sentence at a time: ``input_ids_a`` /
    ``attention_mask_a`` hold ``[CLS] a [SEP]`` and ``input_ids_b`` / ``attention_mask_b``
    hold ``[CLS] b [SEP]``, all padded to the width of ``input_ids`` (docs/reference.md#adabert:
    AdaBERT's two input nodes take A and B separately). By default the batch is padded to its
    longest row (dynamic padding: SST-2 phrases are short, so this is several times
    faster than padding to ``max_length``).
    """
    if texts_b is not None and len(texts_b) != len(texts_a):
        raise DataError(f"{len(texts_a)} first sentences but {len(texts_b)} second sentences")
    padding = "max_length" if pad_to_max else "longest"
    enc = tokenizer(
        list(texts_a),
        list(texts_b) if texts_b is not None else None,
        max_length=max_length,
        truncation=True if texts_b is None else "longest_first",
        padding=padding,
        return_tensors="pt",
        return_token_type_ids=True,
    )
    out = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    if texts_b is not None and separate_b:
        width = out["input_ids"].shape[1]
        for suffix, texts in (("a", texts_a), ("b", texts_b)):
            e = tokenizer(
                list(texts),
                max_length=width,
                truncation=True,
                padding="max_length",
                return_tensors="pt",
            )
            out[f"input_ids_{suffix}"] = e["input_ids"]  # (B, L) same L as input_ids
            out[f"attention_mask_{suffix}"] = e["attention_mask"]
    return out


def encode_tagged(
    tokenizer: Any,
    words: Sequence[Sequence[str]],
    tags: Sequence[Sequence[int]] | None = None,
    max_length: int = 128,
    ignore_index: int = -100,
) -> dict[str, torch.Tensor]:
    """Tokenise pre-split words (SNIPS) and align one tag per word to its first piece.

    Returns ``input_ids``/``attention_mask``/``token_type_ids`` (B, L) and, with ``tags``,
    ``tag_labels`` (B, L): the word's tag on its first WordPiece, ``ignore_index`` on
    continuation pieces, special tokens and padding (the usual slot-filling convention).
    """
    import torch

    enc = tokenizer([list(w) for w in words], is_split_into_words=True, max_length=max_length,
                    truncation=True, padding="longest", return_tensors="pt",
                    return_token_type_ids=True)
    out = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    if tags is not None:
        labels = torch.full_like(enc["input_ids"], ignore_index)
        for b, seq in enumerate(tags):
            previous = None
            for pos, word in enumerate(enc.word_ids(b)):
                if word is not None and word != previous:
                    labels[b, pos] = int(seq[word])
                previous = word
        out["tag_labels"] = labels
    return out


def train_student_vocab(
    texts: Iterable[str],
    out_dir: str | os.PathLike[str],
    vocab_size: int = 5000,
    lowercase: bool = True,
    min_frequency: int = 2,
    progress: bool = True,
) -> Path:
    """Train a WordPiece vocabulary of about ``vocab_size`` tokens and save it in ``out_dir``
    (``progress``: the trainer's own progress bars).

    Every printable ASCII character is forced into the alphabet (and its ``##`` form
    into the vocabulary), so any ASCII word segments without ``[UNK]``
    (docs/reference.md#mixed-vocabulary). Writes ``vocab.txt`` and ``tokenizer.json`` (loadable with
    :func:`load_tokenizer`) and returns ``out_dir``.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=list(ASCII_ALPHABET),
        # limit_alphabet keeps rare non-ASCII characters out of a 5K vocabulary; the ASCII
        # alphabet is added on top of it by initial_alphabet.
        limit_alphabet=len(ASCII_ALPHABET) + 100,
        show_progress=progress,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # WordPiece continues words with "##x"; make sure each ASCII character has both forms
    # even when the corpus never used it inside a word.
    vocab = tok.get_vocab()
    missing = [c for c in ASCII_ALPHABET if c not in vocab]
    missing += [f"##{c}" for c in ASCII_ALPHABET if f"##{c}" not in vocab]
    # Put them into the WordPiece model itself (not as "added tokens", which would be
    # matched as literal strings before pre-tokenisation). Then number the tokens in a
    # canonical order (the special tokens, then the rest sorted): the trainer's own order
    # follows Rust hash maps, which are seeded per process, so the same text gave the same
    # tokens under different ids from one run to the next. WordPiece's segmentation does
    # not depend on the ids, only on the set of tokens. (The *set* may still differ between
    # processes where merge counts tie at the cut-off: the trainer breaks ties by ids it
    # assigns in hash-map order, huggingface/tokenizers#1794; callers cache the result.)
    tokens = set(vocab) | set(missing)
    ordered = list(SPECIAL_TOKENS) + sorted(tokens - set(SPECIAL_TOKENS))
    tok.model = models.WordPiece(vocab={t: i for i, t in enumerate(ordered)},
                                 unk_token="[UNK]")
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        do_lower_case=lowercase,
    )
    fast.save_pretrained(str(out))
    # vocab.txt in id order, as BERT tooling expects.
    ids = tok.get_vocab()
    ordered = sorted(ids, key=ids.__getitem__)
    (out / "vocab.txt").write_text("".join(t + "\n" for t in ordered), encoding="utf-8")
    return out
