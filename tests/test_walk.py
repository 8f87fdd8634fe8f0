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


def test_each_answer_keeps_its_own_counts_in_row_order():
    # row 0 accepts everything, row 1 is too short to walk, row 2 accepts step 1 only
    scored = torch.ones(3, 12, dtype=torch.bool)
    scored[1, 4:] = False
    step1 = torch.tensor([[True] * 12, [True] * 12, [True] * 12])
    step2 = torch.tensor([[True] * 12, [True] * 12, [False] * 12])
    c = walk_chain([step1, step2], scored)
    assert c.answer_accepted == [6, 0, 4] and c.answer_tested == [6, 0, 8]  # passes at 2, 5, 8 / 2, 4, 6, 8
    assert (sum(c.answer_accepted), sum(c.answer_tested)) == (c.accepted, c.tested)
    both = walk_chain([step1[:1], step2[:1]], scored[:1])
    both.add(walk_chain([step1[2:], step2[2:]], scored[2:]))
    assert both.answer_accepted == [6, 4] and both.answer_tested == [6, 8]


def test_alpha_difference_pairs_answers_and_refuses_other_answers():
    from verispec.distill.walk import WalkCounts, alpha_difference

    tested = [20, 20, 20, 20, 20, 20]
    base = WalkCounts(accepted=30, tested=120, answer_accepted=[1, 9, 3, 11, 2, 4], answer_tested=tested)
    same = WalkCounts(accepted=30, tested=120, answer_accepted=[1, 9, 3, 11, 2, 4], answer_tested=tested)
    up = WalkCounts(accepted=36, tested=120, answer_accepted=[2, 10, 4, 12, 3, 5], answer_tested=tested)
    assert alpha_difference(base, same) == (0.0, (0.0, 0.0))
    diff, (lo, hi) = alpha_difference(base, up)
    assert diff == pytest.approx(0.05) and lo == pytest.approx(0.05) and hi == pytest.approx(0.05)
    with pytest.raises(ValueError, match="same answers"):
        alpha_difference(base, WalkCounts(answer_accepted=[1], answer_tested=[2]))


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


def test_by_family_walks_each_familys_answers_and_finds_shards_in_sub_folders(tmp_path, capsys, monkeypatch):
    """``--by-family``: one walk over every answer, then one per family over exactly its rows
    (the loaders and the walk replaced: what is checked is which rows each walk gets)."""
    import types

    import verispec.distill.eagle_stage as eagle_stage
    import verispec.distill.head as head
    import verispec.distill.walk as walk
    import verispec.models as models
    from verispec.distill.walk import WalkCounts

    (tmp_path / "chat").mkdir()
    (tmp_path / "chat" / "answers-00000.safetensors").write_bytes(b"")
    (tmp_path / "raw.safetensors").write_bytes(b"")
    families = ["qa", "math", "qa", "rag"]
    seen = {}

    class Answers:
        def __init__(self, rows):
            self.rows = rows

        def subset(self, idx):
            return Answers([self.rows[i] for i in idx.tolist()])

    def load_answers(paths):
        seen["paths"] = sorted(p.name for p in paths)
        return Answers(list(range(len(families)))), families

    def walk_head(head_, vocab_map, target, answers, k, first):
        seen.setdefault("walks", []).append(answers.rows)
        n = len(answers.rows)  # head "g" accepts one draft more than "h" on every answer
        accepted = [2 + (head_ == "g")] * n
        return 0.5, WalkCounts(passes=n, accepted=sum(accepted), tested=4 * n, answer_accepted=accepted,
                               answer_tested=[4] * n)

    monkeypatch.setattr(head, "load_answers", load_answers)
    monkeypatch.setattr(eagle_stage, "init_head", lambda name: types.SimpleNamespace(head=name, vocab_map=None))
    monkeypatch.setattr(models, "load_causal_lm", lambda name: None)
    monkeypatch.setattr(walk, "walk_head", walk_head)
    assert main(["--head", "h", "--heldout", str(tmp_path), "--by-family"]) == 0
    assert seen["paths"] == ["answers-00000.safetensors", "raw.safetensors"]
    assert seen["walks"] == [[0, 1, 2, 3], [1], [0, 2], [3]]  # all, then math, qa, rag
    out = capsys.readouterr().out
    assert "qa" in out and "2 answers" in out and "alpha 0.500" in out and "against" not in out
    # a second head: every line of it says how far it is from the first, on the same answers
    seen.clear()
    assert main(["--head", "h", "--head", "g", "--heldout", str(tmp_path), "--by-family"]) == 0
    assert seen["walks"] == [[0, 1, 2, 3], [1], [0, 2], [3]] * 2
    lines = capsys.readouterr().out.splitlines()
    g = lines[lines.index(next(x for x in lines if x.startswith("g:"))):]
    assert "alpha 0.750" in g[0] and g[0].endswith("against h +0.250 [+0.250, +0.250]")
    assert g[2].split()[0] == "qa" and g[2].endswith("against h +0.250 [+0.250, +0.250]")
    assert g[1].split()[0] == "math" and g[1].endswith("against h +0.250")  # one answer: no interval
