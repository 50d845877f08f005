"""The one supernet builder and the one child builder, for every space.

``extract_child(supernet, space, arch)`` copies the supernet's weights into the child
of ``arch``: each child tensor is the leading slice of the supernet tensor of the
same name (elastic widths left to right, stacked blocks bottom to top, the first K
layers), docs/reference.md#efficientbert "weight inheritance".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from nas.device import place
from nas.errors import ArchitectureError
from nas.network import GraphNet
from nas.space import SearchSpace


def build_supernet(space: SearchSpace) -> GraphNet:
    """The network holding every candidate op of ``space`` at its largest widths, on the
    run's device (:func:`nas.device.place`; initialised on the CPU first, so a seed gives
    the same weights on every device)."""
    return place(GraphNet(space.graph, space.choice_map))


def build_child(space: SearchSpace, arch: Mapping[str, Any] | None = None) -> GraphNet:
    """The network of one architecture (the default one if ``arch`` is None), on the run's
    device (initialised on the CPU first, as :func:`build_supernet`)."""
    arch = space.default() if arch is None else space.validate(arch)
    return place(GraphNet(space.resolve(arch), resolved=True))


@torch.no_grad()
def inherit_weights(child: torch.nn.Module, supernet: torch.nn.Module) -> None:
    """Copy into every child tensor the leading slice of the supernet tensor of that name."""
    source = supernet.state_dict()
    for name, tensor in child.state_dict().items():
        if name not in source:
            raise ArchitectureError(f"supernet has no tensor {name!r} for the child")
        big = source[name]
        if big.dim() != tensor.dim() or any(s > b for s, b in zip(tensor.shape, big.shape,
                                                                  strict=True)):
            raise ArchitectureError(
                f"tensor {name!r}: child shape {tuple(tensor.shape)} does not fit in "
                f"supernet shape {tuple(big.shape)}"
            )
        tensor.copy_(big[tuple(slice(0, s) for s in tensor.shape)])


def extract_child(supernet: GraphNet, space: SearchSpace, arch: Mapping[str, Any]) -> GraphNet:
    """The child of ``arch`` carrying the supernet's (sliced) weights."""
    child = build_child(space, arch)
    inherit_weights(child, supernet)
    child.train(supernet.training)
    return child
