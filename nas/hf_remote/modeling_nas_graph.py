"""An exported child network as a ``transformers`` model (remote code): a sequence
classifier, or a joint intent + slot model (docs/reference.md#mixed-vocabulary) for a graph ending
in the ``joint_intent_slot`` head, which ``transformers`` has no class for.

The search-free executor of a **resolved** graph (docs/reference.md#efficientbert: the child keeps
exactly the chosen ops at their widths, under the supernet's parameter names): it builds each op
of ``config.graph`` once, in topological order, and runs them in that order. Its
modules are named as :class:`nas.network.GraphNet`'s (``nodes.<node>[.<op>]``,
``edges.<src>-><dst>[.<op>]``), so the export's ``model.safetensors`` loads as is.
It imports only ``torch``, ``transformers`` and the op modules; in an export folder
those are bundled files (:mod:`nas.remote_code`). ``tests/test_export_remote.py`` checks
that it computes what ``nas predict`` computes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import ModelOutput, SequenceClassifierOutput

from nas.hf_remote.configuration_nas_graph import NasGraphConfig
from nas.ops import OPS, Context, SelectOp


def _order(graph: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The graph's nodes in topological order (file order among ready nodes), each with
    its incoming edges sorted by argument position."""
    nodes = {n["id"]: dict(n) for n in graph["nodes"]}
    inputs: dict[str, list[dict[str, Any]]] = {n: [] for n in nodes}
    for e in graph["edges"]:
        inputs[e["target"]].append(e)
    done: set[str] = set()
    order: list[dict[str, Any]] = []
    pending = list(nodes)
    while pending:
        ready = [n for n in pending if all(e["source"] in done for e in inputs[n])]
        if not ready:
            raise ValueError(f"the graph has a cycle through {pending[:3]}")
        for n in ready:
            order.append({**nodes[n], "inputs": sorted(inputs[n], key=lambda e: e["arg"])})
            done.add(n)
        pending = [n for n in pending if n not in done]
    return order


def pair_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """How many tokens of A and of B a pair keeps in ``budget`` tokens (the length less
    the three special tokens): the ``longest_first`` rule of the ``tokenizers`` library
    that ``nas predict`` tokenises with (the shorter text whole when the longer one can
    give up the rest, else half the budget each, the odd token to B's side of the split)."""
    if len_a + len_b <= budget:
        return len_a, len_b
    n1, n2 = sorted((len_a, len_b))
    n2 = n1 if n1 > budget else max(n1, budget - n1)
    if n1 + n2 > budget:
        n1 = budget // 2
        n2 = n1 + budget % 2
    return (n2, n1) if len_a > len_b else (n1, n2)


def truncate(input_ids: torch.Tensor, attention_mask: torch.Tensor,
             token_type_ids: torch.Tensor, length: int, pad_id: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row cut to ``length`` tokens as the tokenizer cuts it with ``truncation=True``
    (``[CLS] a [SEP]``: A's first pieces and the ``[SEP]``; a pair: :func:`pair_lengths`),
    padded to the longest row: what ``nas predict`` feeds the model. A stock ``pipeline``
    does not truncate unless asked, so without this a text longer than the trained length
    got another answer than ``nas predict`` gives."""
    rows = []
    for r in range(input_ids.shape[0]):
        real = attention_mask[r] == 1
        ids, types = input_ids[r][real], token_type_ids[r][real]
        if len(ids) > length:
            n_a = int((types == 0).sum()) - 2  # [CLS] a [SEP]
            n_b = max(int((types == 1).sum()) - 1, 0)  # b [SEP]
            if n_b == 0:
                keep = torch.cat([torch.arange(length - 1), torch.tensor([len(ids) - 1])])
            else:
                k_a, k_b = pair_lengths(n_a, n_b, length - 3)
                keep = torch.cat([torch.arange(1 + k_a), torch.tensor([n_a + 1]),
                                  torch.arange(n_a + 2, n_a + 2 + k_b),
                                  torch.tensor([len(ids) - 1])])
            ids, types = ids[keep], types[keep]
        rows.append((ids, types))
    width = max(len(ids) for ids, _ in rows)
    out_ids = torch.full((len(rows), width), pad_id, dtype=input_ids.dtype)
    out_mask = torch.zeros((len(rows), width), dtype=attention_mask.dtype)
    out_types = torch.zeros((len(rows), width), dtype=token_type_ids.dtype)
    for r, (ids, types) in enumerate(rows):
        out_ids[r, :len(ids)], out_types[r, :len(ids)], out_mask[r, :len(ids)] = ids, types, 1
    return (out_ids.to(input_ids.device), out_mask.to(input_ids.device),
            out_types.to(input_ids.device))


def second_sentence(input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                    attention_mask: torch.Tensor, pad_id: int, width: int | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``[CLS] b [SEP]`` of each joined pair ``[CLS] a [SEP] b [SEP]``, padded to ``width``
    (default the pair's) and cut to it as the tokenizer cuts B alone (its first pieces and
    the ``[SEP]``): what ``nas.tokenization.encode`` gives a graph that embeds B on its own
    (docs/reference.md#adabert, AdaBERT's second input node), rebuilt from what a
    ``pipeline`` passes."""
    width = input_ids.shape[1] if width is None else width
    ids = torch.full((input_ids.shape[0], width), pad_id, dtype=input_ids.dtype,
                     device=input_ids.device)
    mask = torch.zeros_like(ids)
    for r in range(input_ids.shape[0]):
        b = input_ids[r][(token_type_ids[r] == 1) & (attention_mask[r] == 1)]
        row = torch.cat([input_ids[r, :1], b])
        if len(row) > width:
            row = torch.cat([row[: width - 1], row[-1:]])
        ids[r, : len(row)] = row
        mask[r, : len(row)] = 1
    return ids, mask


class NasGraphPreTrainedModel(PreTrainedModel):
    """The child network in ``config.graph``, run op by op; the subclasses read its one
    output as their task's answer."""

    config_class = NasGraphConfig
    base_model_prefix = ""
    main_input_name = "input_ids"

    def __init__(self, config: NasGraphConfig) -> None:
        super().__init__(config)
        self.steps = _order(config.graph)
        widths: dict[str, int] = {}
        self.nodes = nn.ModuleDict()
        self.edges = nn.ModuleDict()
        for st in self.steps:
            for e in st["inputs"]:
                e["in_width"] = widths[e["source"]]
                e["out_width"] = OPS.get(e["op"]).out_width([e["in_width"]], e["params"])
                self.edges[f"{e['source']}->{e['target']}"] = self._make(
                    e["op"], e.get("choice"), [e["in_width"]], e["out_width"], e["params"])
            widths[st["id"]] = int(st["width"])
            if st.get("share") is None:
                self.nodes[st["id"]] = self._make(st["op"], st.get("choice"),
                                                  [e["out_width"] for e in st["inputs"]],
                                                  int(st["width"]), st["params"])
        outputs = [st["id"] for st in self.steps if st.get("role") == "output"]
        if len(outputs) != 1:
            raise ValueError(f"a graph needs exactly one output node, has {outputs}")
        self.output_node = outputs[0]
        self.post_init()

    @staticmethod
    def _make(op: str, choice: str | None, in_widths: Sequence[int], width: int,
              params: Mapping[str, Any]) -> nn.Module:
        module = OPS.get(op)(in_widths, width, params)
        return nn.ModuleDict({op: module}) if choice is not None else module

    def _init_weights(self, module: nn.Module) -> None:
        """Every tensor comes from the export's weights; the ops initialise themselves."""

    def run_graph(self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
                  token_type_ids: torch.Tensor | None, inputs: Mapping[str, Any]
                  ) -> torch.Tensor:
        """The graph's output for ``input_ids`` ... as a BERT model takes them. A graph with
        separate pair inputs also reads ``input_ids_b``/``attention_mask_b`` from
        ``inputs``; when they are not given they are cut out of the joined pair
        (:func:`second_sentence`)."""
        batch = {"input_ids": input_ids, "attention_mask": attention_mask,
                 "token_type_ids": token_type_ids, **inputs}
        if attention_mask is None and input_ids is not None:
            batch["attention_mask"] = torch.ones_like(input_ids)
        if token_type_ids is None and input_ids is not None:
            batch["token_type_ids"] = torch.zeros_like(input_ids)
        pad = getattr(self.config, "pad_token_id", None) or 0  # 5.x configs may lack it
        joined = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
        limit = self.config.trained_length
        if limit and input_ids is not None and input_ids.shape[1] > limit:
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"] = truncate(
                input_ids, batch["attention_mask"], batch["token_type_ids"], limit, pad)
            for key in ("input_ids_b", "attention_mask_b"):  # given separately: cut to match
                if batch.get(key) is not None:
                    batch[key] = batch[key][:, : batch["input_ids"].shape[1]]
        if "input_ids_b" in self.config.inputs and batch.get("input_ids_b") is None and \
                input_ids is not None and token_type_ids is not None:
            # B alone is cut from the whole pair, as nas.tokenization.encode tokenises it
            batch["input_ids_b"], batch["attention_mask_b"] = second_sentence(
                *joined, pad, batch["input_ids"].shape[1])
        missing = [k for k in self.config.inputs if batch.get(k) is None]
        if missing:
            raise ValueError(f"this model reads {missing}, which were not given")
        ctx = Context({k: v for k, v in batch.items() if v is not None})
        states: dict[str, torch.Tensor] = {}
        for st in self.steps:
            if st.get("role") == "aux":  # distillation-only heads: never part of the answer
                continue
            xs, args = [], []
            for e in st["inputs"]:
                # an op, or a ModuleDict of its choice's ops
                module: Any = self.edges[f"{e['source']}->{e['target']}"]
                if e.get("choice") is not None:
                    module = module[e["op"]]
                xs.append(module([states[e["source"]]], e["out_width"], e["params"], ctx))
                args.append(e["arg"])
            module = self.nodes[st["share"] if st.get("share") is not None else st["id"]]
            if st.get("choice") is not None:
                module = module[st["op"]]
            if isinstance(module, SelectOp):
                states[st["id"]] = module.forward_value(xs, args, int(st["select_value"]),
                                                        int(st["width"]), st["params"], ctx)
            else:
                states[st["id"]] = module(xs, int(st["width"]), st["params"], ctx)
        return states[self.output_node]


class NasGraphForSequenceClassification(NasGraphPreTrainedModel):
    """Logits ``(B, num_labels)`` of the child network in ``config.graph``."""

    def forward(self, input_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, return_dict: bool | None = None,
                **inputs: Any) -> SequenceClassifierOutput | tuple[torch.Tensor, ...]:
        """Inputs as a BERT classifier takes them (:meth:`run_graph`)."""
        logits = self.run_graph(input_ids, attention_mask, token_type_ids, inputs)
        loss = None
        if labels is not None:
            if self.config.num_labels == 1:
                loss = nn.functional.mse_loss(logits.squeeze(-1), labels.float())
            else:
                loss = nn.functional.cross_entropy(logits, labels.view(-1))
        if return_dict is False:
            return (logits,) if loss is None else (loss, logits)
        return SequenceClassifierOutput(loss=loss, logits=logits)


@dataclass
class JointIntentSlotOutput(ModelOutput):
    """What :class:`NasGraphForJointIntentSlot` returns: ``intent_logits`` ``(B, I)``,
    ``slot_logits`` ``(B, L, T)`` (one IOB tag per token; a word is read at its first
    piece), and ``loss`` when labels are given."""

    loss: torch.Tensor | None = None
    intent_logits: torch.Tensor | None = None
    slot_logits: torch.Tensor | None = None


class NasGraphForJointIntentSlot(NasGraphPreTrainedModel):
    """A joint intent + slot model (docs/reference.md#mixed-vocabulary): the graph's
    ``joint_intent_slot`` head gives
    one ``(B, L, I + T)`` tensor, the intent logits repeated at every position followed by
    each token's tag logits; this class splits it. ``config.id2label`` lists the I intents,
    then the T tags; ``config.num_intents`` is I."""

    def forward(self, input_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                intent_labels: torch.Tensor | None = None,
                slot_labels: torch.Tensor | None = None, return_dict: bool | None = None,
                **inputs: Any) -> JointIntentSlotOutput | tuple[torch.Tensor, ...]:
        """``intent_labels`` ``(B,)`` and ``slot_labels`` ``(B, L)`` (-100 where a token is
        not scored, e.g. later pieces of a word) give the summed cross-entropy loss."""
        n = int(self.config.num_intents)
        joint = self.run_graph(input_ids, attention_mask, token_type_ids, inputs)
        intent, slots = joint[:, 0, :n], joint[:, :, n:]
        loss = None
        if intent_labels is not None:
            loss = nn.functional.cross_entropy(intent, intent_labels.view(-1))
        if slot_labels is not None:
            slot_loss = nn.functional.cross_entropy(slots.reshape(-1, slots.shape[-1]),
                                                    slot_labels.reshape(-1), ignore_index=-100)
            loss = slot_loss if loss is None else loss + slot_loss
        if return_dict is False:
            return (intent, slots) if loss is None else (loss, intent, slots)
        return JointIntentSlotOutput(loss=loss, intent_logits=intent, slot_logits=slots)
