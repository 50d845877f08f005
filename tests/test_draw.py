"""Drawings: cell inputs as math, readable input names, labels clear of each
other and of the boxes, the whole picture inside the PNG."""

from __future__ import annotations

import pytest

from nas.draw import cell_subgraph, draw_architecture
from nas.space import get_space


def _input_labels(space_name: str, cell: str) -> list[str]:
    space = get_space(space_name)
    sub = cell_subgraph(space.resolve(space.default()), cell)
    return sorted(a["label"] for _, a in sub.nodes(data=True) if a.get("is_input"))


def test_cell_inputs_are_math_and_block_inputs_are_named():
    assert _input_labels("adabert", "cell1") == ["$c_{k-1}$", "$c_{k-2}$"]
    assert _input_labels("mobilebert", "L0") == ["embeddings", "layer 0, FFN 3"]
    assert _input_labels("tinybert", "L0") == ["$x$"]


@pytest.mark.parametrize("name", ["adabert", "tinybert", "mobilebert", "efficientbert"])
def test_drawings_keep_labels_apart_and_inside(name, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kept, real_close = [], plt.close
    monkeypatch.setattr(plt, "close", kept.append)  # keep the figure to inspect it
    space = get_space(name)
    path = draw_architecture(space, None, tmp_path / f"{name}.png")
    assert path.stat().st_size > 5000
    fig = kept[0]
    fig.canvas.draw()
    texts = [t for ax in fig.axes for t in ax.texts if t.get_text()]
    boxes = [t.get_window_extent() for t in texts]
    figure = fig.bbox
    for t, b in zip(texts, boxes, strict=True):
        assert figure.x0 <= b.x0 and b.x1 <= figure.x1 and figure.y0 <= b.y0 and \
            b.y1 <= figure.y1, f"{t.get_text()!r} is clipped"
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), "two labels overlap"
    real_close(fig)
