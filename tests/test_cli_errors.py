"""One error handler: bad input is one ``error:`` line (exit 2), a bug one line (exit 1),
and ``nas --debug`` re-raises so the traceback shows."""

from __future__ import annotations

import pytest

import nas.cli.spaces
from nas.cli import main
from nas.errors import ArchitectureError, SpaceDefinitionError


def test_bad_input_is_one_line_with_status_2(capsys):
    assert main(["spaces", "show", "efficientbert", "-c", "hidden=100", "-c", "heads=12"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: space 'efficientbert': hidden (100) must be divisible by")


def test_an_unexpected_exception_is_one_line_with_status_1(capsys, monkeypatch):
    def broken(args):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(nas.cli.spaces, "cmd_list", broken)
    assert main(["spaces", "list"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("error: ZeroDivisionError: division by zero second line "
                    "(run with --debug for the traceback)")


def test_debug_re_raises(monkeypatch):
    def broken(args):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(nas.cli.spaces, "cmd_list", broken)
    with pytest.raises(ZeroDivisionError, match="boom"):
        main(["--debug", "spaces", "list"])
    with pytest.raises(SpaceDefinitionError, match="divisible"):
        main(["--debug", "spaces", "show", "efficientbert", "-c", "hidden=100"])


def test_drawing_errors_are_nas_errors(tmp_path):
    from nas.draw import cell_subgraph, draw_architecture
    from nas.space import SearchSpace, get_space

    space = get_space("adabert", vocab_size=500, hidden=16, max_depth=2)
    with pytest.raises(ArchitectureError, match="no node of drawing group 'cell9'"):
        cell_subgraph(space.resolve(space.default()), "cell9")
    undrawable = SearchSpace(space.name, space.choices(), space.graph, space.constraints,
                             space.config, drawing=())
    with pytest.raises(SpaceDefinitionError, match="declares nothing to draw"):
        draw_architecture(undrawable, None, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
