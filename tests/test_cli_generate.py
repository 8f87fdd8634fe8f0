"""`verispec generate` end to end on a tiny model directory, and its error paths."""

from __future__ import annotations

import pytest
import torch

from verispec.cli import main
from verispec.testing import save_tiny_llama


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    target = save_tiny_llama(root / "target", vocab_size=64, seed=0, dtype=torch.float32)
    draft = save_tiny_llama(root / "draft", vocab_size=64, seed=1, layers=1, dtype=torch.float32)
    return target, draft


@pytest.mark.parametrize("draft", ["ngram", "none", "model"])
def test_generate_prints_text_and_summary(model_dirs, capsys, draft):
    target, draft_dir = model_dirs
    spec = str(draft_dir) if draft == "model" else draft
    rc = main(["generate", "hello world", "--target", str(target), "--draft", spec, "--k", "3",
               "--max-new-tokens", "12", "--baseline"])
    out = capsys.readouterr()
    assert rc == 0
    assert out.out.strip() != ""
    assert "tok/s" in out.err and "alpha=" in out.err and "tau=" in out.err
    assert "same text: True" in out.err  # greedy speculative output == target-only output


def test_generate_default_k_keeps_sampled_text_reproducible(model_dirs, capsys):
    """k=auto is the default for every method, and one seed gives one text: auto reads a cost
    table measured once (kept in the costs file), not live timings. Each run loads the models
    afresh, as separate processes would."""
    target, draft = model_dirs
    texts = []
    for temperature in ("0", "0.9", "0.9"):
        assert main(["generate", "abc abc abc", "--target", str(target), "--draft", str(draft),
                     "--max-new-tokens", "16", "--temperature", temperature, "--seed", "5"]) == 0
        out = capsys.readouterr()
        assert "k=auto" in out.err
        texts.append(out.out)
    assert texts[1] == texts[2]


def test_generate_streams(model_dirs, capsys):
    target, draft_dir = model_dirs
    assert main(["generate", "abc abc", "--target", str(target), "--draft", str(draft_dir), "--stream",
                 "--max-new-tokens", "10", "--temperature", "0.8", "--seed", "3"]) == 0
    assert capsys.readouterr().out.strip() != ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target", "/nonexistent/model"], "nonexistent"),
        (["--target", "no-such-builtin"], "smollm2-135m"),
        (["--k", "fast"], "--k"),
        (["--k", "0"], "--k"),
        (["--temperature", "-1"], "temperature"),
        (["--temperature", "1e-40"], "temperature"),  # was an IndexError from torch: logits / T overflowed to NaN
        (["--temperature", "nan"], "temperature"),
        (["--seed", str(2**64)], "seed"),
        (["--max-new-tokens", "0"], "max_new_tokens"),
    ],
)
def test_generate_bad_arguments_give_one_clear_line(model_dirs, capsys, args, message):
    target, _ = model_dirs
    argv = ["generate", "hi", "--target", str(target), "--draft", "ngram", *args]
    if args[0] == "--target":
        argv = ["generate", "hi", "--draft", "ngram", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error" in err and message in err
    assert "Traceback" not in err
