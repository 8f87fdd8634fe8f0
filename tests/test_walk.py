"""The chain walk: greedy speculative decoding replayed over an answer from per-step hits."""

from __future__ import annotations

import pytest
import torch

from verispec.distill.walk import main, walk_chain


def _hits(*rows: str) -> list[torch.Tensor]:
    """One ``[1, T]`` bool row per draft step from strings of 1/0."""
    return [torch.tensor([[c == "1" for c in r]]) for r in rows]


def test_every_draft_accepted_gives_alpha_one_and_passes_of_k_plus_one():
    scored = torch.ones(1, 20, dtype=torch.bool)
    c = walk_chain(_hits("1" * 20, "1" * 20, "1" * 20), scored)
    # starts at 3, each pass moves 4 (three drafts and the target's token): 3, 7, 11, 15 (15 + 3 <= 19)
    assert (c.passes, c.accepted, c.tested, c.alpha) == (4, 12, 12, 1.0)
    assert (c.after_full, c.after_full_accepted, c.after_rejection) == (3, 3, 0)


def test_a_rejection_ends_the_pass_one_token_later():
    # step 1 always right, step 2 always wrong: every pass accepts one draft and tests two
    scored = torch.ones(1, 12, dtype=torch.bool)
    c = walk_chain(_hits("1" * 12, "0" * 12), scored)
    assert (c.passes, c.accepted, c.tested) == (4, 4, 8)  # passes at 2, 4, 6, 8 (8 + 2 <= 11)
    assert c.alpha == 0.5 and c.first_rate == 1.0
    assert (c.after_rejection, c.after_rejection_accepted, c.after_full) == (3, 3, 0)


def test_the_walk_reads_each_step_where_the_chain_stands():
    # the first draft of the pass at 2 is right, its second wrong at 3; the pass at 4 fails at once
    # (step 1 wrong at 4), the pass at 5 accepts both (step 1 at 5, step 2 at 6)
    step1 = "0011011000"
    step2 = "0000001000"
    c = walk_chain(_hits(step1, step2), torch.ones(1, 10, dtype=torch.bool))
    # passes at 2 (1 accepted), 4 (0), 5 (2, full), 8? 8 + 2 > 9: stops
    assert (c.passes, c.accepted, c.tested) == (3, 3, 5)
    assert (c.first_accepted, c.after_rejection, c.after_rejection_accepted) == (2, 2, 1)


def test_first_keeps_the_passes_near_the_start_of_the_answer_only():
    scored = torch.zeros(1, 40, dtype=torch.bool)
    scored[0, 10:] = True  # the prompt fills 0-9
    hits = _hits("1" * 40, "0" * 40)
    whole, early = walk_chain(hits, scored), walk_chain(hits, scored, first=8)
    assert early.passes == 3 and whole.passes > early.passes  # passes at 12, 14, 16 (16 + 2 <= 18)


def test_rows_too_short_for_a_pass_are_skipped():
    c = walk_chain(_hits("111", "111"), torch.ones(1, 3, dtype=torch.bool))
    assert c.passes == 0 and c.alpha == 0.0


def test_bad_arguments_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--head", "eagle", "--heldout", str(tmp_path), "--k", "0"])
    assert "--k must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--head", "eagle", "--heldout", str(tmp_path)])
    assert "no answer shards" in capsys.readouterr().err
    (tmp_path / "x.safetensors").write_bytes(b"")
    with pytest.raises(SystemExit):
        main(["--head", str(tmp_path / "no-head"), "--heldout", str(tmp_path)])
    err = capsys.readouterr().err
    assert "error: --head" in err and "no-head" in err
