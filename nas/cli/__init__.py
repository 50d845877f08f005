"""The ``nas`` command: a thin layer over typed functions (litgpt's ``__main__``
pattern: each subcommand maps to a plain function).

Each command group lives in its own module exposing ``register(subparsers)``. Errors
caused by bad input (:class:`nas.errors.NasError`) are printed as one line naming the
problem and the fix, with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

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
    "nas.cli.cache",
)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``error:`` line (exit 2), like every
    other bad input, instead of argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from nas import __version__

    parser = OneLineParser(
        prog="nas", description="Neural architecture search for compact Transformers."
    )
    parser.add_argument("--version", action="version", version=f"nas {__version__}",
                        help="print the version and exit")
    # here rather than in main(), so that the generated reference (docs/gen_cli.py) lists it
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error instead of one line")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    for sub in _subparsers(parser):  # every command takes --quiet, anywhere on the line
        if "--quiet" not in sub._option_string_actions:
            flags = [f for f in ("--quiet", "-q") if f not in sub._option_string_actions]
            sub.add_argument(*flags, action="store_true",
                             help="print only the results: no progress bars, no log lines, "
                                  "no library reports (warnings still show)")
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every (nested) subcommand parser of ``parser``, depth first."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                found += [sub, *_subparsers(sub)]
    return found


def _silence(args: argparse.Namespace) -> Callable[[], None]:
    """Apply ``--quiet`` / ``--no-progress``; returns what undoes it (``main`` runs in
    tests, many times per process).

    ``--no-progress`` also turns off the bars and load reports of transformers,
    huggingface_hub and datasets (they print their own, which our flags never reached);
    ``--quiet`` implies it and lowers every logger to warnings."""
    quiet = bool(getattr(args, "quiet", False))
    if quiet and hasattr(args, "no_progress"):
        args.no_progress = True
    if not (quiet or getattr(args, "no_progress", False)):
        return lambda: None
    undo: list[Callable[[], None]] = []
    if quiet:
        previous = logging.root.manager.disable
        logging.disable(logging.INFO)
        undo.append(lambda: logging.disable(previous))
    undo.append(_silence_libraries())

    def undo_all() -> None:
        for f in reversed(undo):
            f()

    return undo_all


#: What libraries imported during the command read at import time to stay quiet.
_QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
              "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


#: Libraries that read their progress-bar variable of :data:`_QUIET_ENV` into module
#: constants at import: package → (variable, the modules holding it).
_FROZEN_AT_IMPORT = {
    "huggingface_hub": ("HF_HUB_DISABLE_PROGRESS_BARS",
                        ("huggingface_hub.constants", "huggingface_hub.utils.tqdm")),
    "datasets": ("HF_DATASETS_DISABLE_PROGRESS_BARS", ("datasets.config", "datasets.utils.tqdm")),
}


def _unfreeze(variable: str, value: str | None, modules: Sequence[str]) -> None:
    """A library imported during a quiet command froze our ``variable=1`` into module
    constants: give them what the restored environment (``value``) implies, or every later
    command in this process would be told bars cannot be enabled."""
    import importlib

    flag = None if value is None else value.upper() in ("1", "ON", "YES", "TRUE")
    for name in modules:
        module = importlib.import_module(name)
        if hasattr(module, variable):
            setattr(module, variable, flag)


def _silence_libraries() -> Callable[[], None]:
    """transformers', huggingface_hub's and datasets' bars and reports off: directly for
    those already imported, through their environment variables for those the command
    imports later (so a quiet command that never needs them does not pay for importing
    them). The undo restores the environment and, for a library imported meanwhile, the
    settings it would have had."""
    import os

    saved = {k: os.environ.get(k) for k in _QUIET_ENV}
    before = {m: m in sys.modules for m in ("transformers", "huggingface_hub", "datasets")}
    os.environ.update(_QUIET_ENV)
    states: dict[str, Any] = {}
    if before["huggingface_hub"]:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars

        states["hub"] = are_progress_bars_disabled()
        disable_progress_bars()
    if before["transformers"]:
        from transformers.utils import logging as hf_logging

        states["transformers"] = (hf_logging.get_verbosity(),
                                  hf_logging.is_progress_bar_enabled())
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    if before["datasets"]:
        import datasets

        states["datasets"] = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()

    def undo() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        hub_off = bool(saved["HF_HUB_DISABLE_PROGRESS_BARS"])
        for package, (variable, modules) in _FROZEN_AT_IMPORT.items():
            if package in sys.modules and not before[package]:
                _unfreeze(variable, saved[variable], modules)
        if "huggingface_hub" in sys.modules:
            from huggingface_hub.utils import enable_progress_bars

            if not states.get("hub", hub_off):
                enable_progress_bars()
        if "transformers" in sys.modules:
            from transformers.utils import logging as hf_logging

            level = hf_logging.log_levels.get(saved["TRANSFORMERS_VERBOSITY"] or "warning",
                                              hf_logging.WARNING)
            verbosity, bars = states.get("transformers", (level, not hub_off))
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()
        if "datasets" in sys.modules:
            import datasets

            if states.get("datasets", not saved["HF_DATASETS_DISABLE_PROGRESS_BARS"]):
                datasets.enable_progress_bars()

    return undo


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
    args = parser.parse_args(argv)
    restore = _silence(args)
    from nas.model_card import recorded_command

    with warnings.catch_warnings(), recorded_command(sys.argv[1:] if argv is None else argv):
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
        finally:
            restore()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
