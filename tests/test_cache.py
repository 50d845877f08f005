"""The cache's root, keys, lock and weight files (:mod:`nas.cache`).

The pinned keys below were computed by the code these helpers replaced
(``nas.distill.general.settings_key``, ``nas.teacher.finetune_key``'s own hash and
``nas.distill.cache._short_hash``): a changed key would make every cached teacher,
warm-up and teacher output unreachable, so they must never move.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from nas.cache import (
    CACHE_ENV,
    cache_root,
    exclusive,
    json_key,
    load_weights,
    save_weights,
    settings_key,
)
from nas.teacher import FinetuneConfig, finetune_key


def test_keys_are_those_of_earlier_releases():
    assert finetune_key("sst2", "t", ["d"],
                        FinetuneConfig(epochs=1, max_seq_len=64, lr=1)) == "db683275c1f2bd3e"
    assert settings_key(teacher="t", space="s", config={"b": [1, 2], "a": None},
                        path=Path("/x")) == "9713a7cd2ec4026a"
    assert json_key(["fp", "mean", True], 12) == "4448864caccb"
    assert json_key([[1, 2, 3]], 12) == "4f6f1e9b8e73"


def test_a_key_ignores_the_order_settings_were_given_in():
    assert settings_key(a=1, b=2) == settings_key(b=2, a=1) != settings_key(a=1, b=3)
    assert len(settings_key(a=1)) == 16


def test_the_root_follows_argument_then_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv(CACHE_ENV)
    assert cache_root() == Path.home() / ".cache" / "nas-engine"


def test_a_second_writer_waits_for_the_first(tmp_path):
    lock, order = tmp_path / ".lock", []

    def second() -> None:
        with exclusive(lock, "the test"):
            order.append("second")

    with exclusive(lock, "the test"):
        # flock locks per open file, so a thread of this process contends like a process
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.2)
        order.append("first")
    thread.join(timeout=10)
    assert order == ["first", "second"]


def test_weights_round_trip(tmp_path):
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    save_weights(a, tmp_path / "w.safetensors")
    load_weights(b, tmp_path / "w.safetensors")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                 b.state_dict().values(), strict=True))


def test_importing_the_cache_does_not_import_torch():
    code = "import sys, nas.cache; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
