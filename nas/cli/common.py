"""Helpers shared by the command modules: space options, architecture loading, output."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

import yaml

from nas.architecture import Architecture, load_architecture
from nas.errors import NasError

if TYPE_CHECKING:  # the space machinery imports torch: load it only when a command runs
    from nas.space import SearchSpace


def positive_int(text: str) -> int:
    """An argparse type: an integer ≥ 1 (sizes, lengths, counts)."""
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """An argparse type: an integer ≥ 0 (seeds, indices, warm-up counts)."""
    return _int_at_least(text, 0, "a non-negative integer")


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def add_space_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", "-c", action="append", default=[], metavar="KEY=VALUE",
        help="space hyperparameter override, e.g. -c num_labels=3 -c pair=true (repeatable)",
    )


def parse_space_config(items: list[str]) -> dict[str, Any]:
    config = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise NasError(f"--config expects KEY=VALUE, got {item!r}")
        config[key.strip()] = yaml.safe_load(value)
    return config


def space_from_args(args: argparse.Namespace) -> SearchSpace:
    from nas.space import get_space

    return get_space(args.space, **parse_space_config(getattr(args, "config", [])))


def arch_from_args(space: SearchSpace, arch: str | None) -> Architecture:
    """The ``--arch`` given (file or inline JSON), validated; the default when absent.

    On the command line an architecture may be partial: the choices it names are
    checked first (unknown names, bad values), the others take their defaults.
    """
    if arch is None:
        return space.default()
    loaded = load_architecture(arch)
    if loaded is None:  # not reached: only None loads as None
        return space.default()
    if loaded.space not in (None, space.name):
        raise NasError(f"the architecture is for space {loaded.space!r}, not {space.name!r}")
    for name, value in loaded.items():
        space.choice(name).validate(value)
    return space.validate({**space.default(), **loaded})


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as one JSON document under ``--json``, else ``text``."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print(text)
