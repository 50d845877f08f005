"""The ``nas`` command: a thin layer over typed functions (STYLE.md pattern 12).

Each command group lives in its own module exposing ``register(subparsers)``. Errors
caused by bad input (:class:`nas.errors.NasError`) are printed as one line naming the
problem and the fix, with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from nas.errors import NasError

#: Command-group modules, each with ``register(subparsers)``.
COMMAND_MODULES = (
    "nas.cli.spaces",
    "nas.cli.cost",
    "nas.cli.teacher",
    "nas.cli.augment",
    "nas.cli.search",
    "nas.cli.export",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nas", description="Neural architecture search for compact Transformers."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except NasError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"error: {err.strerror}: {err.filename}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `nas spaces show X | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
