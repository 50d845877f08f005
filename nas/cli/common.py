"""Helpers shared by the command modules: space options, architecture loading, output."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nas.architecture import Architecture, load_architecture
from nas.config import YamlRefused, parse_yaml
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


def device_setting(text: str) -> str:
    """An argparse type: a device setting (``auto``, ``cpu``, ``cuda``, ``cuda:N``:
    :mod:`nas.device`), checked for spelling; the hardware is checked when it is used."""
    from nas.device import DEVICES, is_device_spec

    if not is_device_spec(text):
        raise argparse.ArgumentTypeError(f"expected {DEVICES}, got {text!r}")
    return text.strip().lower()


def add_device_option(parser: argparse.ArgumentParser, default: str | None,
                      what: str) -> None:
    """``--device auto|cpu|cuda[:N]`` on a command that runs models (one wording for all)."""
    shown = f"default {default}" if default else "default: the experiment's `device:`, auto"
    parser.add_argument("--device", type=device_setting, default=default,
                        metavar="auto|cpu|cuda[:N]",
                        help=f"where {what} ({shown}; auto: a CUDA GPU when there is one)")


def runtime_device(args: argparse.Namespace) -> str:
    """``--device`` for an export's runtime: ``auto`` means the CPU under ``--runtime
    onnx`` (ONNX Runtime runs on the CPU here); an explicit GPU there is refused by
    :func:`nas.runtime.load`."""
    return "cpu" if args.device == "auto" and args.runtime == "onnx" else args.device


def seed_int(text: str) -> int:
    """An argparse type: a seed, an integer in [0, 2**32 - 1] (:data:`nas.seeding.MAX_SEED`:
    what numpy's legacy seeding and the samplers take; outside, they fail mid-run)."""
    from nas.seeding import SEED_RANGE, is_seed

    value = _int_at_least(text, 0, f"a seed, {SEED_RANGE}")
    if not is_seed(value):
        raise argparse.ArgumentTypeError(f"expected a seed, {SEED_RANGE}, got {text!r}")
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
        try:
            config[key.strip()] = parse_yaml(value)
        except YamlRefused as err:
            raise NasError(f"--config {key.strip()}: {err}") from None
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


def check_output(path: str | os.PathLike[str] | None, kind: Literal["file", "dir"] = "file", *,
                 overwrite: bool = False, overwrite_flag: str | None = None,
                 flag: str = "-o") -> Path | None:
    """``path`` as a :class:`~pathlib.Path`, checked before any work starts (since
    0aa243d): a command must not train or augment for minutes and then fail to write.

    Refused, each in one line naming the path and the fix: a folder where a file is
    expected, a file where a folder is expected, an existing file (unless ``overwrite``;
    ``overwrite_flag`` names the command's flag that allows it), and a parent folder that
    is missing, is a file or cannot be written. An existing folder for ``kind="dir"`` is
    left to the command (it knows whether it may replace what is inside). ``None`` (no
    output asked) passes through.
    """
    if path is None:
        return None
    out = Path(path).expanduser()
    where = f"{flag} {out}"
    if out.is_symlink() and not out.exists():
        raise NasError(f"{where}: is a symbolic link to a missing {os.readlink(out)}; remove "
                       "the link or name another path")
    if kind == "file" and out.is_dir():
        raise NasError(f"{where}: is a folder, and a file is expected; name a file "
                       f"(e.g. {out / 'NAME'})")
    if kind == "dir" and out.exists() and not out.is_dir():
        raise NasError(f"{where}: is a file, and a folder is expected; name a new or existing "
                       "folder (or remove the file)")
    if kind == "file" and out.exists() and not overwrite:
        fix = f"pass {overwrite_flag} to replace it" if overwrite_flag else "remove it"
        raise NasError(f"{where}: the file exists; {fix}, or name another file")
    parent = out.absolute().parent
    if not parent.exists():
        raise NasError(f"{where}: its folder {parent} does not exist; create it first "
                       f"(mkdir -p {parent}) or name another path")
    if not parent.is_dir():
        raise NasError(f"{where}: {parent} is a file, not a folder; name another path")
    if not os.access(parent, os.W_OK | os.X_OK) or not _can_create_in(parent):
        raise NasError(f"{where}: the folder {parent} is not writable; name a folder you can "
                       "write to")
    return out


def _can_create_in(folder: Path) -> bool:
    """Whether a file can be made in ``folder``, tried (``os.access`` says yes to root on
    read-only file systems such as ``/sys``)."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".nas-probe-")
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True
