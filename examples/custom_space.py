"""Define your own search space: a two-node cell over three ops, in about 30 lines.

Run: ``python examples/custom_space.py`` (writes ``tiny_cell.png`` in the current folder).
The space is declared once, as a graph; the supernet, the child, the costs and the
drawing all come from it.
"""

from __future__ import annotations

import torch

from nas import Categorical, ChoiceRef, GraphBuilder, SearchSpace, get_space, register_space
from nas.builder import build_supernet, extract_child
from nas.cost import count_costs, dummy_batch
from nas.draw import draw_architecture
from nas.space import check_hyperparameters

OPS = ("std_conv_3", "max_pool_3", "skip")


@register_space("tiny-cell", test_config={"vocab_size": 300, "hidden": 16})
def tiny_cell(vocab_size: int = 30522, hidden: int = 64, num_labels: int = 2) -> SearchSpace:
    # sizes of 0 or below, refused in one line (nas run refuses them while loading the file)
    check_hyperparameters("tiny-cell", locals(), positive=("vocab_size", "hidden", "num_labels"))
    choices = [Categorical("a", OPS), Categorical("b", OPS), Categorical("c", OPS)]
    g = GraphBuilder()
    g.node("emb", "embedding", group="embeddings", params=dict(
        vocab_size=vocab_size, embedding_size=hidden, out=hidden, max_positions=512))
    g.node("n0", "sum", cell="cell", group="encoder")               # n0 = a(emb)
    g.node("n1", "sum", cell="cell", group="encoder")               # n1 = b(emb) + c(n0)
    g.edge("emb", "n0", ChoiceRef("a"))
    g.edge("emb", "n1", ChoiceRef("b"))
    g.edge("n0", "n1", ChoiceRef("c"))
    g.node("head", "pooler_classifier", role="output", group="head",   # mean over tokens:
           params={"num_labels": num_labels, "pooling": "mean"})    # a conv cell's [CLS] is local
    g.edge("n1", "head")
    return SearchSpace("tiny-cell", choices, g.graph, drawing=[("tiny cell", "cell")],
                       config=dict(vocab_size=vocab_size, hidden=hidden),
                       description="a two-node cell over three ops (docs/plugins.md example)")


def main() -> None:
    space = get_space("tiny-cell")
    arch = space.sample(0)
    print("space size:", space.size(), "| sampled:", dict(arch))
    supernet = build_supernet(space).eval()
    child = extract_child(supernet, space, arch).eval()
    batch = dummy_batch(2, 16)
    with torch.no_grad():
        diff = (child(batch).logits - supernet(batch, arch=arch).logits).abs().max().item()
    print(f"child == supernet[arch]: max |diff| = {diff:.1e}")
    costs = count_costs(space, arch, seq_len=128)
    print(f"parameters {costs.params:,}, FLOPs at 128 tokens {costs.flops:,}")
    print("drawing:", draw_architecture(space, arch, "tiny_cell.png"))


if __name__ == "__main__":
    main()
