"""Drawings of a resolved graph: the cells or FFN expressions with their chosen ops.

Each drawing group of a space (``SearchSpace.drawing``) is a set of nodes sharing a
``cell`` attribute; their outside predecessors are drawn as inputs. Nodes are laid out
left to right by topological generation; edges are labelled with their op.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from nas.errors import ArchitectureError, SpaceDefinitionError
from nas.space import SearchSpace

INPUT_COLOUR = "#cfe2f3"
NODE_COLOUR = "#fff2cc"
OUTPUT_COLOUR = "#d9ead3"


def cell_subgraph(graph: nx.DiGraph, cell: str) -> nx.DiGraph:
    """The nodes of ``cell`` plus, as inputs, the outside nodes that feed them."""
    inside = [n for n, a in graph.nodes(data=True) if a.get("cell") == cell]
    if not inside:
        raise ArchitectureError(f"no node of drawing group {cell!r} in this architecture; "
                                f"pick a group the architecture keeps")
    sub = nx.DiGraph()
    inputs = []
    for n in inside:
        sub.add_node(n, **graph.nodes[n])
    for n in inside:
        for src, _, e in graph.in_edges(n, data=True):
            if src not in sub:
                inputs.append(src)
                sub.add_node(src, **graph.nodes[src], is_input=True)
            sub.add_edge(src, n, **e)
    names = {1: ["x"], 2: ["c_{k-2}", "c_{k-1}"]}.get(len(dict.fromkeys(inputs)))
    for i, src in enumerate(dict.fromkeys(inputs)):
        sub.nodes[src]["label"] = names[i] if names else src
    return sub


def expression_view(sub: nx.DiGraph) -> nx.DiGraph:
    """Redraw a cell as an expression graph: ops become nodes, pass-throughs vanish.

    Edge ops turn into nodes of their own, ``first`` (no binary op) and identity
    edges are contracted, so ``linear2(gelu(linear1(x)))`` reads as a chain of four
    boxes with the residual input arced over it.
    """
    view = nx.DiGraph()
    alias: dict[str, str] = {}

    def target(n: str) -> str:
        while n in alias:
            n = alias[n]
        return n

    for n in nx.topological_sort(sub):
        a = sub.nodes[n]
        ins = sorted(sub.in_edges(n, data=True), key=lambda t: t[2].get("arg", 0))
        sources = []
        for src, _, e in ins:
            src = target(src)
            op = str(e.get("op"))
            if op != "identity":
                mid = f"{src}~{n}"
                label = f"linear\n→{e['params'].get('out')}" if op == "linear" else op
                view.add_node(mid, label=label)
                view.add_edge(src, mid)
                src = mid
            sources.append(src)
        if a.get("is_input"):
            view.add_node(n, label=a.get("label", n), is_input=True)
        elif a.get("op") == "ffn_expression" and len(sources) == 1:
            alias[n] = _expand_expression(view, n, a["params"], sources[0])
        elif a.get("op") in ("first", "sum") and len(sources) == 1:
            alias[n] = sources[0]  # a pass-through: draw nothing
        else:
            label = "LN(x + ·)" if a.get("op") == "residual_norm" else str(a.get("op"))
            view.add_node(n, label=label)
            for src in sources:
                view.add_edge(src, n)
    return view


def _expand_expression(view: nx.DiGraph, n: str, params: Mapping[str, Any], source: str
                       ) -> str:
    """Draw an FFN expression (SPEC §3) as its DAG: one box per distinct subexpression,
    ``x`` being ``source``; returns the box of the expression's output."""
    from nas.ops.expression import dag_drawing, parse

    boxes: dict[str, str] = {}
    for node_id, op, inputs in dag_drawing(parse(str(params["expr"]))):
        if not inputs:  # the input x
            boxes[node_id] = source
            continue
        box = boxes[node_id] = f"{n}~{node_id}"
        label = op
        if op == "linear1":
            label = f"linear1\n→{params.get('inner')}"
        view.add_node(box, label=label)
        for i in inputs:
            view.add_edge(boxes[i], box)
    return boxes[node_id]


def _layout(sub: nx.DiGraph) -> dict[str, tuple[float, float]]:
    pos = {}
    for x, generation in enumerate(nx.topological_generations(sub)):
        generation = sorted(generation)
        for i, n in enumerate(generation):
            pos[n] = (float(x), (len(generation) - 1) / 2.0 - i)
    return pos


def _edge_sets(sub: nx.DiGraph, pos: Mapping[str, tuple[float, float]]
               ) -> list[tuple[list[tuple[str, str]], float]]:
    """Edges between neighbouring generations drawn nearly straight; longer ones arced."""
    near = [(u, v) for u, v in sub.edges if abs(pos[v][0] - pos[u][0]) <= 1.0]
    far = [(u, v) for u, v in sub.edges if abs(pos[v][0] - pos[u][0]) > 1.0]
    # long edges bend away from the middle row: up from upper sources, down from lower ones
    order = {n: i for i, n in enumerate(sorted(sub))}  # stable across processes
    up = [(u, v) for u, v in far if pos[u][1] > 0 or (pos[u][1] == 0 and order[u] % 2 == 0)]
    down = [e for e in far if e not in up]
    return [(near, 0.08), (up, -0.3), (down, 0.3)]


def _edge_label(e: Mapping[str, Any]) -> str:
    op = str(e.get("op"))
    if op == "identity" and e.get("choice") is None:
        return ""
    if op == "linear":
        return f"linear→{e['params'].get('out')}"
    return op


def _node_label(n: str, a: Mapping[str, Any]) -> str:
    label = str(a.get("label", n))
    op = a.get("op")
    if a.get("choice") is not None or op in ("add", "mul", "max"):
        return f"{label}\n{op}"
    return label


def draw_architecture(space: SearchSpace, arch: Mapping[str, Any] | None, path: str | Path,
                      title: str | None = None) -> Path:
    """Draw every drawing group of ``space`` for ``arch`` into one PNG file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arch = space.default() if arch is None else space.validate(arch)
    graph = space.resolve(arch)
    groups = [(t, c) for t, c in space.drawing
              if any(a.get("cell") == c for _, a in graph.nodes(data=True))]
    if not space.drawing:
        raise SpaceDefinitionError(
            f"space {space.name!r} declares nothing to draw (its drawing groups are empty); "
            f"use `nas spaces show {space.name}` to see its graph"
        )
    if not groups:
        raise ArchitectureError(
            f"none of space {space.name!r}'s drawing groups "
            f"({', '.join(c for _, c in space.drawing)}) is in this architecture"
        )
    cols = min(2 if space.config.get("drawing_style") == "expression" else 3, len(groups))
    rows = math.ceil(len(groups) / cols)
    row_height = 3.0 if space.config.get("drawing_style") == "expression" else 4.2
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, row_height * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (group_title, cell) in zip(axes.flat, groups, strict=False):
        sub = cell_subgraph(graph, cell)
        expression = space.config.get("drawing_style") == "expression"
        if expression:
            sub = expression_view(sub)
        pos = _layout(sub)
        colours = [INPUT_COLOUR if sub.nodes[n].get("is_input") else
                   OUTPUT_COLOUR if sub.out_degree(n) == 0 else NODE_COLOUR for n in sub]
        nx.draw_networkx_nodes(sub, pos, ax=ax, node_color=colours, node_size=1500,
                               edgecolors="#555555")
        nx.draw_networkx_labels(sub, pos, ax=ax, font_size=8,
                                labels={n: _node_label(n, sub.nodes[n]) for n in sub})
        if expression:  # arc the edges that skip over a step (the residual input x)
            for rad, keep in ((0.0, 1.0), (-0.45, None)):
                edges = [(u, v) for u, v in sub.edges
                         if (abs(pos[v][0] - pos[u][0]) <= 1.0) == (keep is not None)]
                nx.draw_networkx_edges(sub, pos, ax=ax, edgelist=edges, arrows=True,
                                       arrowsize=14, node_size=1500, edge_color="#444444",
                                       connectionstyle=f"arc3,rad={rad}")
            suffix = _group_note(space, arch, cell)
            texts = [str(a["params"]["expr"]) for _, a in graph.nodes(data=True)
                     if a.get("cell") == cell and a.get("op") == "ffn_expression"]
            note = "\n".join([*texts[:1], *([suffix] if suffix else [])])
            ax.set_title(group_title + (f"\n{note}" if note else ""), fontsize=10)
            ax.margins(0.12, 0.6)
            continue
        for edges, rad in _edge_sets(sub, pos):
            style = f"arc3,rad={rad}"
            nx.draw_networkx_edges(sub, pos, ax=ax, edgelist=edges, arrows=True, arrowsize=14,
                                   node_size=1500, connectionstyle=style, edge_color="#444444")
            nx.draw_networkx_edge_labels(
                sub, pos, ax=ax, font_size=7, label_pos=0.5, connectionstyle=style,
                edge_labels={(u, v): _edge_label(sub.edges[u, v]) for u, v in edges},
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9},
            )
        suffix = _group_note(space, arch, cell)
        ax.set_title(group_title + (f"\n{suffix}" if suffix else ""), fontsize=10)
        ax.margins(0.15)
        low, high = ax.get_ylim()
        ax.set_ylim(min(low, -1.3), max(high, 1.3))
    fig.suptitle(title or f"{space.name}  arch {arch.id}", fontsize=12)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _group_note(space: SearchSpace, arch: Mapping[str, Any], cell: str) -> str:
    """A one-line note under a group's title: depth, stack and width choices in force."""
    notes = []
    prefix = cell.split(".")[0] + "."
    for c in space.choices():
        if c.kind in ("depth", "width") and (c.name.startswith(prefix) or "." not in c.name):
            notes.append(f"{c.name.removeprefix(prefix)}={arch[c.name]}")
    return ", ".join(notes)
