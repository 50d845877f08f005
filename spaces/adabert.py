"""AdaBERT: a stack of CNN cells searched differentiably (Chen et al., 2020;
docs/reference.md#adabert).

Each cell has two input nodes (the outputs of the two previous cells, c_{k-2} and
c_{k-1}), three intermediate nodes, each summing one mixed edge from every earlier
node (2 + 3 + 4 = 9 edges), and an output that is an attention-weighted sum of the
intermediate nodes. The cell structure is shared by all stacked cells: the nine
edge choices are referenced by every cell. Depth K ∈ 1..K_max gates the cells, and
the readout mean-pools the active cells' outputs and combines them attentively.

Single-sentence tasks feed the same embedding to both inputs of the first cell;
sentence pairs feed sentence A and sentence B separately (same embedding weights,
positions restarting for B).
"""

from __future__ import annotations

from nas.choices import Categorical, IntChoice
from nas.graph import ActiveIf, ChoiceRef, Dim, GraphBuilder
from nas.ops.cnn import ADABERT_OPS
from nas.space import SearchSpace, check_hyperparameters, register_space

INTERMEDIATE_NODES = 3


def edge_choice_name(node: int, source: str) -> str:
    """``cell.n1.from_prev2``: the op on the edge from ``source`` into intermediate ``node``."""
    return f"cell.n{node}.from_{source}"


def edge_sources(node: int) -> list[str]:
    return ["prev2", "prev1"] + [f"n{j}" for j in range(node)]


@register_space("adabert", test_config={"vocab_size": 500, "hidden": 16, "max_depth": 4})
def adabert_space(
    num_labels: int = 2,
    pair: bool = False,
    vocab_size: int = 30522,
    hidden: int = 128,
    max_depth: int = 8,
    max_positions: int = 512,
) -> SearchSpace:
    """The AdaBERT space; ``pair=True`` for sentence-pair tasks (MRPC)."""
    check_hyperparameters("adabert", locals(), flags=("pair",), positive=(
        "num_labels", "vocab_size", "hidden", "max_depth", "max_positions"))
    edge_choices = [
        Categorical(edge_choice_name(j, src), ADABERT_OPS, default="std_conv_3",
                    doc=f"op on the edge {src} -> n{j} of every cell")
        for j in range(INTERMEDIATE_NODES) for src in edge_sources(j)
    ]
    depth = IntChoice("depth", 1, max_depth, default=min(3, max_depth), kind="depth",
                      doc="number of stacked cells K")

    g = GraphBuilder()
    emb = dict(vocab_size=vocab_size, embedding_size=hidden, out=hidden,
               max_positions=max_positions, type_vocab_size=0, norm="layer_norm")
    g.node("emb", "embedding", params={**emb, "key": "input_ids"}, group="embeddings")
    if pair:
        g.node("emb_b", "embedding", params={**emb, "key": "input_ids_b"}, share="emb",
               group="embeddings")
    else:  # c_{-1} = c_0 = the sentence's embedding
        g.node("emb_b", "sum", group="embeddings")
        g.edge("emb", "emb_b")

    prev2, prev1 = "emb", "emb_b"
    for k in range(1, max_depth + 1):
        cell = f"cell{k}"
        active = ActiveIf("depth", k)
        sources = {"prev2": prev2, "prev1": prev1}
        for j in range(INTERMEDIATE_NODES):
            node = g.node(f"c{k}_n{j}", "sum", params={"width": hidden}, active=active,
                          group="encoder", cell=cell, label=f"n{j}")
            for src in edge_sources(j):
                g.edge(sources.get(src, f"c{k}_{src}"), node,
                       ChoiceRef(edge_choice_name(j, src)))
        out = g.node(f"c{k}_out", "attention_sum", params={"inputs": INTERMEDIATE_NODES},
                     active=active, group="encoder", cell=cell, label="out",
                     record="hidden_states")
        for j in range(INTERMEDIATE_NODES):
            g.edge(f"c{k}_n{j}", out, arg=j)
        prev2, prev1 = prev1, out

    g.node("readout", "attentive_readout", select="depth", role="output", group="head",
           params={"layers": Dim("depth"), "num_labels": num_labels})
    for k in range(1, max_depth + 1):
        g.edge(f"c{k}_out", "readout", arg=k)

    return SearchSpace(
        "adabert", [*edge_choices, depth], g.graph,
        config=dict(num_labels=num_labels, pair=pair, vocab_size=vocab_size, hidden=hidden,
                    max_depth=max_depth, max_positions=max_positions),
        drawing=[("AdaBERT cell (shared by all cells)", "cell1")],
        description="AdaBERT CNN cells + depth (Chen et al. 2020): 9 mixed edges of 10 ops, K ≤ "
                    f"{max_depth}, hidden {hidden}, {'pair' if pair else 'single'} input",
    )
