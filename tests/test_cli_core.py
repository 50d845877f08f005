"""The ``nas`` command's core groups: spaces and cost."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nas.cli import main

PAPER_ARCH = "experiments/archs/efficientbert_paper.json"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_spaces_list_json(capsys):
    code, out, _ = run(capsys, "spaces", "list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and rows["adabert"]["choices"] == 10 and not rows["adabert"]["fixed"]
    code, out, _ = run(capsys, "spaces", "list", "ada*", "--json")
    assert [r["name"] for r in json.loads(out)] == ["adabert"]


def test_spaces_show_reports_size_and_graph(capsys):
    code, out, _ = run(capsys, "spaces", "show", "adabert", "--json")
    d = json.loads(out)
    assert d["size"] == 10**9 * 8
    assert d["graph"]["choice_edges"] == 9 * 8  # nine mixed edges in each of 8 cells
    code, out, _ = run(capsys, "spaces", "show", "adabert", "-c", "pair=true")
    assert "pair input" in out


def test_spaces_sample_is_seeded_and_valid(capsys, tmp_path):
    _, first, _ = run(capsys, "spaces", "sample", "efficientbert", "--seed", "5",
                      "-o", str(tmp_path / "a.json"))
    _, second, _ = run(capsys, "spaces", "sample", "efficientbert", "--seed", "5")
    assert first == second
    code, out, _ = run(capsys, "cost", "efficientbert", "--arch", str(tmp_path / "a.json"),
                       "--json")
    assert code == 0 and json.loads(out)["arch_id"] == json.loads(first)["id"]


def test_cost_of_the_published_efficientbert(capsys):
    code, out, _ = run(capsys, "cost", "efficientbert", "--arch", PAPER_ARCH, "--json")
    d = json.loads(out)
    assert code == 0
    assert d["params_paper"] == pytest.approx(15.7e6, rel=0.02)
    assert d["params"] == pytest.approx(15.7e6, rel=0.02)
    assert d["flops"] == 2 * d["macs"] and d["seq_len"] == 128


def test_cost_with_latency(capsys):
    code, out, _ = run(capsys, "cost", "adabert", "-c", "vocab_size=500", "--seq-len", "16",
                       "--latency", "--repeats", "2", "--json")
    assert code == 0 and json.loads(out)["latency"]["median_ms"] > 0


@pytest.mark.parametrize("arch, message", [
    ('{"depth": 9}', "choice 'depth': 9 is not allowed; allowed values: 1, 2"),
    ('{"dpth": 2}', "has no choice 'dpth'; did you mean 'depth'?"),
    ('{"depth": 3', "inline JSON: broken JSON at line 1 column 12"),
    ("nope.json", "architecture file 'nope.json' does not exist"),
])
def test_malformed_arch_gives_one_line_error(capsys, arch, message):
    code, out, err = run(capsys, "cost", "adabert", "--arch", arch)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_unknown_space_suggests_close_names(capsys):
    code, _, err = run(capsys, "spaces", "show", "adabrt")
    assert code == 2 and "did you mean 'adabert'" in err


def test_draw_writes_a_png(capsys, tmp_path):
    out_file = tmp_path / "cell.png"
    code, out, _ = run(capsys, "spaces", "draw", "adabert", "-o", str(out_file))
    data = out_file.read_bytes()
    assert code == 0 and data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    code, _, _ = run(capsys, "spaces", "draw", "efficientbert", "--arch", PAPER_ARCH,
                     "-o", str(tmp_path / "ffn.png"))
    assert code == 0 and (tmp_path / "ffn.png").stat().st_size > 10_000


def test_console_script_runs():
    proc = subprocess.run([sys.executable, "-m", "nas.cli", "spaces", "list"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "efficientbert" in proc.stdout


def test_datasets_first_imported_in_a_quiet_command_gets_its_bars_back_without_a_warning():
    """datasets freezes HF_DATASETS_DISABLE_PROGRESS_BARS=1 at import, as huggingface_hub
    does: a run that first read a user's file through it ended with "Cannot enable
    progress bars" on stderr, and later commands in the process had no bars."""
    import os
    import subprocess
    import sys

    script = """
import sys, warnings
from nas.cli import _silence_libraries
assert "datasets" not in sys.modules
undo = _silence_libraries()
import datasets
assert not datasets.is_progress_bar_enabled()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    undo()
print([str(w.message) for w in caught], datasets.is_progress_bar_enabled())
"""
    env = {k: v for k, v in os.environ.items() if k != "HF_DATASETS_DISABLE_PROGRESS_BARS"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[] True"


def test_a_quiet_command_leaves_later_commands_in_the_process_quiet_free(tmp_path):
    """huggingface_hub first imported inside a --quiet command freezes the environment's
    HF_HUB_DISABLE_PROGRESS_BARS=1 into module constants; the undo must reset them, or
    every later command in the process adds a 'Cannot enable progress bars' warning line
    to its one-line error (seen in the full test run)."""
    import subprocess
    import sys

    script = f"""
import contextlib, io, sys
from nas.cli import main
assert "huggingface_hub" not in sys.modules
assert main(["export", "--space", "tinybert", "-o", r"{tmp_path / 'out'}", "--random-init",
             "--quiet"]) == 0
assert "huggingface_hub" in sys.modules
err = io.StringIO()
with contextlib.redirect_stderr(err):
    assert main(["run", r"{tmp_path / 'missing.yaml'}", "--no-progress"]) == 2
print(repr(err.getvalue()))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    lines = eval(out.stdout.strip().splitlines()[-1]).splitlines()  # noqa: S307  (our repr)
    assert len(lines) == 1 and lines[0].startswith("error: experiment file"), lines
