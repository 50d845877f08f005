"""The ``transformers`` configuration of an exported child network (remote code).

Its ``config.json`` is the export's own (:mod:`nas.export`): the resolved child graph
(``graph``), the model's input names (``inputs``), the label names, plus the usual
``model_type``/``auto_map``/``id2label`` keys; a joint intent + slot model also has
``num_intents``. This file imports only ``transformers``.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig


class NasGraphConfig(PretrainedConfig):
    """``graph``: the resolved child graph (node-link JSON, :func:`nas.graph.to_json`);
    ``inputs``: the batch entries the graph reads (``input_ids``, ``attention_mask``...);
    ``num_intents``: for a joint intent + slot head, how many of the labels are intents
    (the rest are slot tags); ``trained_length``: the length the model was trained (and
    ``nas predict`` truncates) at, to which the model cuts longer inputs itself."""

    model_type = "nas_graph"

    def __init__(self, graph: dict[str, Any] | None = None, inputs: list[str] | None = None,
                 num_intents: int | None = None, trained_length: int | None = None,
                 **kwargs: Any) -> None:
        self.graph = graph or {"nodes": [], "edges": []}
        self.trained_length = trained_length
        self.inputs = list(inputs or ["input_ids", "attention_mask", "token_type_ids"])
        self.num_intents = num_intents
        super().__init__(**kwargs)
