"""Transfer text (``transfer:``), teacher assistants (``final.chain``) and the final
retrain's layer map: the loss on transfer rows, the file's checks before the teacher
stage, and a smoke-sized compress run that uses all three."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nas.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "compress_smoke.yaml"
#: the compress smoke file shrunk for the tiny teacher (as tests/test_compress.py does),
#: its two truncations both retrained
TINY = ("teacher_finetune.max_train_examples=32", "teacher_finetune.max_dev_examples=32",
        "data.max_train_examples=80", "importance.samples=16", "searcher=truncation",
        "evaluator.settings.max_steps=1")


def _run(run: Path, teacher: Path, *sets: str, resume: bool = False) -> int:
    argv = ["run", str(SMOKE), "--run-dir", str(run), "--no-progress",
            *(["--resume"] if resume else [])]
    for item in (*TINY, f"teacher={teacher}", *sets):
        argv += ["--set", item]
    return main(argv)


def _task(texts, pair=False):
    from nas.data import TaskData

    return TaskData(task="t", split="dev", kind="pair" if pair else "single",
                    texts_a=tuple(texts), labels=(0,) * len(texts), label_names=("a", "b"),
                    texts_b=tuple(texts) if pair else None, fingerprint="f")


def test_transfer_rows_learn_the_teachers_distribution_alone():
    """A batch of labelled rows gets exactly ``kd_loss``; a transfer row (``NO_LABEL``)
    only the soft term T²·KL, averaged with the labelled rows' losses."""
    import torch
    import torch.nn.functional as F

    from nas.distill.losses import kd_loss
    from nas.transfer import NO_LABEL, transfer_kd_loss

    torch.manual_seed(0)
    s, t = torch.randn(3, 2), torch.randn(3, 2)
    labels = torch.tensor([1, 0, 1])
    assert torch.equal(transfer_kd_loss(s, t, labels, 2.0, 0.5), kd_loss(s, t, labels, 2.0, 0.5))
    mixed = torch.tensor([1, NO_LABEL, 0])

    def soft(i):
        p_t = F.softmax(t[i] / 2, -1)
        return 4 * float((p_t * (p_t.log() - F.log_softmax(s[i] / 2, -1))).sum())

    ce = [float(F.cross_entropy(s[i:i + 1], labels[i:i + 1])) for i in range(3)]
    by_hand = (0.5 * ce[0] + 0.5 * soft(0) + soft(1) + 0.5 * float(
        F.cross_entropy(s[2:3], torch.tensor([0]))) + 0.5 * soft(2)) / 3
    assert float(transfer_kd_loss(s, t, mixed, 2.0, 0.5)) == pytest.approx(by_hand, rel=1e-5)


def test_transfer_text_drops_what_overlaps_dev_and_the_report_split(tmp_path):
    """A text sharing an 8-word phrase with dev, or equal to a report text, is dropped
    and counted; ``max_texts`` keeps the first N left; every label is ``NO_LABEL``."""
    from nas.transfer import NO_LABEL, TransferText, load_transfer

    dev = _task(["one two three four five six seven eight nine ten"])
    report = _task(["a short one"])
    lines = ["fresh text here", "zero one two three four five six seven eight", "A short one",
             "another fresh text", "a third fresh text"]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n")
    data, info = load_transfer(TransferText(texts=str(tmp_path / "t.txt"), max_texts=2),
                               _task(["x"]), [dev, report])
    assert data.texts_a == ("fresh text here", "another fresh text")
    assert data.labels == (NO_LABEL, NO_LABEL) and data.label_names == ("a", "b")
    assert info == {"file": str(tmp_path / "t.txt"), "read": 5, "overlap_dropped": 2,
                    "rows": 2}


def test_a_pair_task_reads_both_columns(tmp_path):
    """A pair task (MRPC) needs ``text_pair``; a table gives both texts."""
    from nas.errors import DataError
    from nas.transfer import TransferText, load_transfer

    path = tmp_path / "t.csv"
    path.write_text("s1,s2\nthe cat sat,a cat sat down\n")
    with pytest.raises(DataError, match=r"transfer.texts: .*name the second text's column "
                                        r"as transfer.text_pair"):
        load_transfer(TransferText(texts=str(path), text="s1"), _task(["x"], pair=True), [])
    data, _ = load_transfer(TransferText(texts=str(path), text="s1", text_pair="s2"),
                            _task(["x"], pair=True), [])
    assert data.texts_a == ("the cat sat",) and data.texts_b == ("a cat sat down",)


def test_a_bad_transfer_file_is_refused_before_the_teacher_stage(tmp_path, capsys,
                                                                  tiny_teacher):
    """An unreadable file (here an empty one; the others are cases of
    tests/test_bad_inputs.py) is refused before anything ran: no run folder, so no
    teacher stage either."""
    path = tmp_path / "t.txt"
    path.write_bytes(b"")
    run = tmp_path / "run"
    assert _run(run, tiny_teacher, f"transfer={{texts: {path}}}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no text in it" in err[0]
    assert not run.exists()


def test_the_dry_run_counts_the_transfer_rows_and_each_final_retrain(tmp_path, capsys,
                                                                      tiny_teacher):
    """The plan's final retrain trains on its train rows and the transfer texts the run
    keeps (a dev sentence dropped), once per final point and seed; the estimate counts
    every one of them."""
    from nas.data import load_task

    leak = next(t for t in load_task("sst2", "dev").texts_a[:64] if len(t.split()) >= 10)
    path = tmp_path / "transfer.txt"
    path.write_text("\n".join([*(f"a sentence about film number {i}" for i in range(39)),
                               leak]) + "\n")
    argv = ["run", str(SMOKE), "--dry-run", "--set", f"teacher={tiny_teacher}"]
    for item in (*TINY, "final={select: latency_ratios, ratios: [2, 5], seeds: 2}"):
        argv += ["--set", item]
    assert main([*argv, "--set", f"transfer={{texts: {path}}}"]) == 0
    text = capsys.readouterr().out
    (line,) = [x for x in text.splitlines() if x.startswith("  retrain: ") and "steps (" in x]
    assert "on 119 examples: 80 of train and 39 transfer texts" in line
    assert line.endswith("up to 2 final point(s) × 2 seed(s)")

    def retrain(*more: str) -> dict:
        assert main([*argv, *more, "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        return next(s for s in plan["stages"] if s["name"] == "retrain")

    # the estimate charges the retrain's steps once per point and seed
    alone = retrain()
    assert (alone["examples"], alone["transfer"], alone["repeats"]) == (80, 0, 4)
    with_text = retrain("--set", f"transfer={{texts: {path}}}")
    assert (with_text["examples"], with_text["transfer"], with_text["steps"]) == (119, 39, 4)
    # every planned truncation retrains: a list the run makes, so counted as one point
    assert main([*argv, "--set", "final={select: all, seeds: 2}"]) == 0
    assert "2 seed(s) × the points the searcher plans" in capsys.readouterr().out


def test_transfer_text_chain_and_layer_map_in_a_compress_run(tmp_path, tiny_teacher):
    """Smoke-sized compress run with ``transfer:`` (a dev sentence among the texts is
    dropped; one augmented variant of each whole training sentence), ``final.chain`` and
    ``layer_mapping: uniform``: the transfer rows count in the retrain's steps, the faster
    truncation is distilled from the slower one (which learnt from the teacher), the
    assistant's logits are cached beside its weights, and a resumed chain reloads the
    finished assistant's weights (the point retrains the same)."""
    from nas.data import load_task

    dev = load_task("sst2", "dev")
    leak = next(t for t in dev.texts_a[:64] if len(t.split()) >= 10)
    lines = [f"review sentence number {i} about a film that was fine" for i in range(39)]
    path = tmp_path / "transfer.txt"
    path.write_text("\n".join([*lines, leak]) + "\n")
    run = tmp_path / "run"
    sets = (f"transfer={{texts: {path}, augment: {{n: 1}}}}",
            "final={select: all, seeds: 1, chain: true}",
            "evaluator.settings.layer_mapping=uniform")
    assert _run(run, tiny_teacher, *sets) == 0
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    transfer = next(e for e in log if e.get("stage") == "transfer")
    assert transfer["read"] == 40 and transfer["overlap_dropped"] == 1
    assert transfer["rows"] == 39
    augment = next(e for e in log if e.get("stage") == "transfer_augment")
    assert augment["of"] == 80 and 0 < augment["augmented_rows"] < 80  # whole sentences
    assert augment["variants"] == augment["augmented_rows"] and augment["rows"] > 0
    metrics = json.loads((run / "metrics.json").read_text())
    rows = {f["tag"]: f["seeds"][0] for f in metrics["final"]}
    assert [f["tag"] for f in metrics["final"]] == ["trial0", "trial1"]  # the chosen order
    # 80 task rows + 39 transfer rows + the variants, in batches of 32 (3 steps alone)
    steps = math.ceil((80 + 39 + augment["rows"]) / 32)
    assert steps > 3 and {r["train_steps"] for r in rows.values()} == {steps}
    # trial1 keeps both layers (slower): it learns from the teacher, trial0 from it
    assert rows["trial1"]["distilled_from"] == "teacher"
    assert rows["trial0"]["distilled_from"] == "trial1"
    assistant = run / "final" / "trial1" / "seed0" / rows["trial1"]["arch_id"]
    assert len(list(assistant.glob("logits-*.npy"))) == 1
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["evaluator"]["settings"]["layer_mapping"] == "uniform"
    assert config["transfer"]["texts"] == str(path)

    # resume with the faster point undone: the assistant's weights are read back
    weights = run / "final" / "trial0" / "seed0" / rows["trial0"]["arch_id"] / "model.safetensors"
    before = weights.read_bytes()
    import shutil

    shutil.rmtree(run / "final" / "trial0")
    if (run / "export").exists():
        shutil.rmtree(run / "export")
    assert _run(run, tiny_teacher, *sets, resume=True) == 0
    again = {f["tag"]: f["seeds"][0] for f in
             json.loads((run / "metrics.json").read_text())["final"]}
    assert again["trial0"]["distilled_from"] == "trial1"
    assert weights.read_bytes() == before
    assert again["trial0"]["test"] == rows["trial0"]["test"]


def test_sentence_rows_are_the_rows_inside_no_longer_row():
    """``rows: sentences`` keeps each whole sentence once and drops its phrases (a row
    that lies, word for word, inside a longer one)."""
    from nas.transfer import sentence_rows

    data = _task(["a fine film", "A fine film , really", "fine film", "another one",
                  "a fine film , really", "film , really good"])
    assert sentence_rows(data).texts_a == ("A fine film , really", "another one",
                                           "film , really good")


def test_augmented_transfer_rows_are_variants_labelled_by_nobody(tiny_teacher, monkeypatch,
                                                                 tmp_path):
    """``transfer.augment``: N variants of each whole sentence (the originals and the
    phrases left out), every label ``NO_LABEL``; a variant overlapping dev is dropped."""
    from nas.transfer import NO_LABEL, TransferAugment, augmented_transfer

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    data = _task(["the movie was a great and moving story", "great and moving",
                  "one two three four five six seven eight nine"])
    dev = _task(["one two three four five six seven eight nine ten"])
    rows, info = augmented_transfer(data, TransferAugment(n=3, p_t=0.0), str(tiny_teacher),
                                    32, [dev])
    # p_t 0: every variant is its sentence; the dev sentence's three are dropped
    assert rows.texts_a == ("the movie was a great and moving story",) * 3
    assert set(rows.labels) == {NO_LABEL}
    assert info["augmented_rows"] == 2 and info["variants"] == 6
    assert info["overlap_dropped"] == 3 and info["rows"] == 3


def test_transfer_text_stays_out_of_the_teachers_cache_key(tmp_path):
    """Adding ``transfer:`` never re-fine-tunes the teacher: the task and the fine-tune
    settings, what its cache key is made of, are the same with and without it."""
    from nas.methods import load_experiment
    from nas.teacher import finetune_key

    path = tmp_path / "t.txt"
    path.write_text("some text\n")
    _, plain = load_experiment(SMOKE)
    _, with_text = load_experiment(SMOKE, [f"transfer={{texts: {path}, augment: {{n: 2}}}}"])
    assert with_text.transfer.enabled and not plain.transfer.enabled
    assert with_text.task == plain.task
    assert finetune_key(plain.task, "t", ["d"], plain.finetune_config()) == finetune_key(
        with_text.task, "t", ["d"], with_text.finetune_config())
