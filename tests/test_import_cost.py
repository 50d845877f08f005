"""The command line starts without importing torch, so cached answers come back fast."""

from __future__ import annotations

import subprocess
import sys


def test_cli_parser_does_not_import_torch():
    code = ("import sys, nas, nas.cli; nas.cli.build_parser(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_lazy_public_names_resolve():
    import nas

    assert nas.get_space("adabert").name == "adabert"
    assert "GraphBuilder" in nas.__all__
