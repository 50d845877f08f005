"""Every flag of every command has help text, and the global flags work."""

from __future__ import annotations

import argparse

import pytest

from nas.cli import _subparsers, build_parser, main


def _undocumented(parser: argparse.ArgumentParser) -> list[str]:
    missing = []
    for sub in [parser, *_subparsers(parser)]:
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{sub.prog} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_flag_of_every_command_has_help():
    parser = build_parser()
    assert len(_subparsers(parser)) > 10  # the walk reaches the nested commands
    assert _undocumented(parser) == []


def test_the_walk_finds_a_missing_help():
    parser = build_parser()
    sub = _subparsers(parser)[-1]
    sub.add_argument("--undocumented-flag")
    assert _undocumented(parser) == [f"{sub.prog} --undocumented-flag"]


def test_version(capsys):
    from nas import __version__

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"nas {__version__}"


def test_every_command_takes_quiet():
    parser = build_parser()
    assert all("--quiet" in sub._option_string_actions for sub in _subparsers(parser))
