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
from typing import NoReturn

from nas.errors import NasError

#: Command-group modules, each with ``register(subparsers)``.
COMMAND_MODULES = (
    "nas.cli.spaces",
    "nas.cli.cost",
    "nas.cli.latency",
    "nas.cli.teacher",
    "nas.cli.augment",
    "nas.cli.search",
    "nas.cli.export",
    "nas.cli.audit",
)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``error:`` line (exit 2), like every
    other bad input, instead of argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="nas", description="Neural architecture search for compact Transformers."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command: bad input prints one ``error:`` line (exit 2), so does any other
    exception (exit 1).

    ``--debug`` re-raises instead, so the traceback shows. Warnings (a plug-in that failed
    to load) print as one ``warning: <message>`` line each, without the source line.
    """
    import warnings

    def one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"warning: {message}", file=sys.stderr if file is None else file)

    parser = build_parser()
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error instead of one line")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = one_line_warning
        try:
            return int(args.func(args) or 0)
        except BrokenPipeError:  # e.g. `nas spaces show X | head`
            sys.stderr.close()
            return 0
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except Exception as err:
            if args.debug:
                raise
            if isinstance(err, NasError):
                print(f"error: {err}", file=sys.stderr)
                return 2
            if isinstance(err, FileNotFoundError):
                print(f"error: {err.strerror}: {err.filename}", file=sys.stderr)
                return 2
            message = " ".join(str(err).split())  # one line, whatever the exception holds
            print(f"error: {type(err).__name__}: {message} (run with --debug for the traceback)",
                  file=sys.stderr)
            return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
