"""Drawings of a resolved graph: the cells or FFN expressions with their chosen ops.

Each drawing group of a space (``SearchSpace.drawing``) is a set of nodes sharing a
``cell`` attribute; their outside predecessors are drawn as inputs. Nodes are laid out
left to right by topological generation; edges are labelled with their op.
"""

from __future__ import annotations

import math
import re
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
    inputs = list(dict.fromkeys(inputs))
    # A DARTS/AdaBERT cell reads the two previous cells (docs/reference.md#adabert): c_{k-2},
    # c_{k-1}, as math. Other groups name their inputs (a MobileBERT block reads the embeddings...).
    darts = len(inputs) == 2 and all(graph.nodes[n].get("cell") is None or
                                     graph.nodes[n].get("cell") != cell for n in inputs) and \
        any(a.get("op") == "sum" and "_n" in n for n, a in sub.nodes(data=True))
    names = ["$c_{k-2}$", "$c_{k-1}$"] if darts else \
        ["$x$"] if len(inputs) == 1 else [pretty_name(n) for n in inputs]
    for src, name in zip(inputs, names, strict=True):
        sub.nodes[src]["label"] = name
    return sub


def pretty_name(node: str) -> str:
    """A readable name for a graph node drawn as an input (``emb`` → embeddings...)."""
    if node in ("emb", "emb_norm"):
        return "embeddings"
    if (m := re.fullmatch(r"L(\d+)_f(\d+)_out", node)) is not None:
        return f"layer {m[1]}, FFN {m[2]}"
    if (m := re.fullmatch(r"L(\d+)_(\w+)", node)) is not None:
        return f"layer {m[1]} {m[2]}"
    return node


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
    """Draw an FFN expression (docs/reference.md#efficientbert) as its DAG: one box per distinct
    subexpression, ``x`` being ``source``; returns the box of the expression's output."""
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
    expression = space.config.get("drawing_style") == "expression"
    views = []
    for group_title, cell in groups:
        sub = cell_subgraph(graph, cell)
        if expression:
            sub = expression_view(sub)
        suffix = _group_note(space, arch, cell)
        if expression:  # the expression's text above its drawing (its first stacked FFN)
            texts = [str(a["params"]["expr"]) for _, a in graph.nodes(data=True)
                     if a.get("cell") == cell and a.get("op") == "ffn_expression"]
            suffix = "\n".join([*texts[:1], *([suffix] if suffix else [])])
        views.append((group_title + (f"\n{suffix}" if suffix else ""), sub, _layout(sub)))
    cols = min(2 if expression else 3, len(groups))
    rows = math.ceil(len(groups) / cols)
    # each panel as wide as its longest chain of steps needs for readable boxes
    steps = max(max(x for x, _ in pos.values()) + 1 for _, _, pos in views)
    height = max(max(abs(y) for _, y in pos.values()) * 2 + 1 for _, _, pos in views)
    panel_w, panel_h = max(6.5, 2.2 * steps), max(3.2, 1.25 * height + 1.6)
    fig, axes = plt.subplots(rows, cols, figsize=(panel_w * cols, panel_h * rows),
                             squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (panel_title, _, pos) in zip(axes.flat, views, strict=False):
        xs, ys = [x for x, _ in pos.values()], [y for _, y in pos.values()]
        ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
        pad = 1.0 if expression else 1.5  # room for the arcs above and below the rows
        ax.set_ylim(min(ys) - pad, max(ys) + pad)
        ax.set_title(panel_title, fontsize=10)
    fig.suptitle(title or f"{space.name}  arch {arch.id}", fontsize=12)
    fig.tight_layout()  # first: the label spots below are computed in display space
    for ax, (_, sub, pos) in zip(axes.flat, views, strict=False):
        _draw_panel(fig, ax, sub, pos, expression)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.2)  # nothing clipped
    plt.close(fig)
    return path


def _draw_panel(fig: Any, ax: Any, sub: nx.DiGraph, pos: Mapping[str, tuple[float, float]],
                expression: bool) -> None:
    """Nodes as boxes sized to their labels; arrows clipped at the boxes' borders; each
    edge's op written at the middle of its curve (so parallel edges' labels separate)."""
    boxes = {}
    for n in sub:
        a = sub.nodes[n]
        colour = INPUT_COLOUR if a.get("is_input") else \
            OUTPUT_COLOUR if sub.out_degree(n) == 0 else NODE_COLOUR
        boxes[n] = ax.text(*pos[n], _node_label(n, a), ha="center", va="center", fontsize=8,
                           zorder=3, bbox={"boxstyle": "round,pad=0.45", "fc": colour,
                                           "ec": "#555555"})
    fig.canvas.draw()  # place the boxes, so that arrows can be clipped at their borders
    # what a label must not cover (display coordinates): the boxes, then the labels so far
    placed = [tuple(box.get_bbox_patch().get_window_extent().extents) for box in boxes.values()]
    for (u, v), rad in _edge_curvatures(sub, pos, expression).items():
        style = f"arc3,rad={rad}"
        # above the boxes (zorder): drawn after them, so clipped at their current borders
        ax.annotate("", xy=pos[v], xytext=pos[u], zorder=3.5,
                    arrowprops={"arrowstyle": "-|>", "color": "#444444", "lw": 1.0,
                                "connectionstyle": style, "patchA": boxes[u].get_bbox_patch(),
                                "patchB": boxes[v].get_bbox_patch(), "shrinkA": 1,
                                "shrinkB": 1, "mutation_scale": 12})
        label = "" if expression else _edge_label(sub.edges[u, v])
        if label:
            ax.text(*_label_spot(ax, pos[u], pos[v], rad, label, placed), label, fontsize=7,
                    ha="center", va="center", zorder=4,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                          "alpha": 0.9})


def _edge_curvatures(sub: nx.DiGraph, pos: Mapping[str, tuple[float, float]],
                     expression: bool) -> dict[tuple[str, str], float]:
    """Neighbouring steps: straight; longer edges arced (away from the middle row), more
    the farther they reach, so that edges sharing an end do not run on top of each other."""
    order = {n: i for i, n in enumerate(sorted(sub))}  # stable across processes
    out = {}
    for u, v in sub.edges:
        span = abs(pos[v][0] - pos[u][0])
        if span <= 1.0:
            out[u, v] = 0.0 if expression else 0.05
            continue
        up = pos[u][1] > 0 or (pos[u][1] == 0 and order[u] % 2 == 0)
        # A cell's long edges bend more the farther they reach, so that edges sharing an
        # end separate; an expression's one residual arc bends less, so it stays low.
        rad = 0.8 / span if expression else min(0.2 + 0.08 * span, 0.45)
        out[u, v] = -rad if up else rad
    return out


def _label_spot(ax: Any, a: tuple[float, float], b: tuple[float, float], rad: float,
                label: str, placed: list[tuple[float, ...]]) -> tuple[float, float]:
    """Where an edge's label goes: the middle of matplotlib's ``arc3`` curve from ``a`` to
    ``b`` (a quadratic Bézier whose control point is set in display space), or, when that
    spot would cover a box or another label (crossing edges share their middle), the first
    free spot further along the curve."""
    (x1, y1), (x2, y2) = ax.transData.transform(a), ax.transData.transform(b)
    mx, my = (x1 + x2) / 2, (y1 + y2) / 2
    cx, cy = mx + rad * (y2 - y1), my - rad * (x2 - x1)
    scale = ax.figure.dpi / 72.0
    half_w, half_h = 0.32 * 7 * scale * len(label) + 3, 0.5 * 7 * scale + 3  # 7 pt text

    def rect(t: float) -> tuple[float, float, float, float]:
        x = (1 - t) ** 2 * x1 + 2 * (1 - t) * t * cx + t * t * x2
        y = (1 - t) ** 2 * y1 + 2 * (1 - t) * t * cy + t * t * y2
        return (x - half_w, y - half_h, x + half_w, y + half_h)

    def free(r: tuple[float, ...]) -> bool:
        return all(r[2] < o[0] or o[2] < r[0] or r[3] < o[1] or o[3] < r[1] for o in placed)

    spot = next((r for r in map(rect, (0.5, 0.4, 0.6, 0.3, 0.7, 0.25, 0.75)) if free(r)),
                rect(0.5))
    placed.append(spot)
    centre = ((spot[0] + spot[2]) / 2, (spot[1] + spot[3]) / 2)
    return tuple(ax.transData.inverted().transform(centre))




def _group_note(space: SearchSpace, arch: Mapping[str, Any], cell: str) -> str:
    """A one-line note under a group's title: depth, stack and width choices in force."""
    notes = []
    prefix = cell.split(".")[0] + "."
    for c in space.choices():
        if c.kind in ("depth", "width") and (c.name.startswith(prefix) or "." not in c.name):
            notes.append(f"{c.name.removeprefix(prefix)}={arch[c.name]}")
    return ", ".join(notes)
