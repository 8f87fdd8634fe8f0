"""Answer shards: continuous batching writes, per shard, exactly what a plain generate gives each
instruction, and a re-run resumes instead of starting over."""

from __future__ import annotations

import pytest
import torch

from verispec.distill.answers import AnswerJob, answer_shards, generate_answers, read_answer_shard, shard_path
from verispec.distill.config import mix
from verispec.engine import SpeculativeDecoder
from verispec.sampling import SamplingParams

JOBS = [AnswerJob(f"j{i}", "chat" if i % 2 else "math", " ".join("abcdefgh"[: 2 + i % 5])) for i in range(7)]


def _run(target, out, **kw):
    args = dict(max_new_tokens=6, max_batch=3, shard_size=3, seed=5, sample_frac=0.5, chat=False)
    args.update(kw)
    return generate_answers(target, JOBS, out, **args)


def test_shards_hold_what_a_plain_generate_gives_each_instruction(tiny_target, tmp_path) -> None:
    run = _run(tiny_target, tmp_path)
    assert (run.written, run.skipped, run.answers) == (3, 0, 7)
    shards = answer_shards(tmp_path)
    assert [p.name for p in shards] == [shard_path(tmp_path, i).name for i in range(3)]
    dec = SpeculativeDecoder(tiny_target, None)
    sampled = 0
    for p in shards:
        t, ids, families = read_answer_shard(p)
        assert families == [j.family for j in JOBS if j.id in ids]
        for b, jid in enumerate(ids):
            job = next(j for j in JOBS if j.id == jid)
            prompt = dec.encode([job.text])[0]
            n, L = int(t["prompt_len"][b]), int(t["length"][b])
            assert t["input_ids"][b, :n].tolist() == prompt
            answer = t["input_ids"][b, n:L].tolist()
            # alone, greedy or sampled as the shard's own rule says: the same tokens
            for temp in (0.0, 0.8):
                alone = dec.generate([prompt], 6, SamplingParams(temperature=temp, seed=mix(5, jid))).token_ids[0]
                if alone == answer:
                    sampled += temp > 0
                    break
            else:
                raise AssertionError(f"{jid}: shard answer {answer} is not what generate gives alone")
            assert t["weight"][b, : L - 1].all() and not t["weight"][b, L - 1:].any()
            assert t["generated"][b, n - 1 : L - 1].all() and not t["generated"][b, : n - 1].any()
    assert 0 < sampled < len(JOBS)  # sample_frac 0.5 mixes greedy and sampled answers


def test_a_rerun_skips_written_shards_and_writes_the_missing_one(tiny_target, tmp_path) -> None:
    _run(tiny_target, tmp_path)
    before = {p.name: read_answer_shard(p) for p in answer_shards(tmp_path)}
    shard_path(tmp_path, 1).unlink()
    run = _run(tiny_target, tmp_path)
    assert (run.written, run.skipped, run.answers) == (1, 2, 3)
    after = {p.name: read_answer_shard(p) for p in answer_shards(tmp_path)}
    assert after.keys() == before.keys()
    for name, (t, ids, fam) in after.items():
        t0, ids0, fam0 = before[name]
        assert (ids, fam) == (ids0, fam0) and all(torch.equal(t[k], t0[k]) for k in t0)


def test_a_time_budget_leaves_no_partial_shard(tiny_target, tmp_path) -> None:
    run = _run(tiny_target, tmp_path, time_budget_s=1e-9)
    assert run.written == 0 and answer_shards(tmp_path) == []
    assert not list(tmp_path.glob(".*tmp*"))


def test_a_time_budget_that_ends_within_a_shard_lets_that_shard_finish(tiny_target, tmp_path, monkeypatch) -> None:
    """The budget is read at each shard's start: a shard begun before it ends is admitted whole
    and written (a check per request would drop that shard's last rows and lose its answers)."""
    import verispec.distill.answers as answers

    clock = iter(range(10**6))  # each reading of the clock is one second later
    monkeypatch.setattr(answers.time, "perf_counter", lambda: float(next(clock)))
    run = _run(tiny_target, tmp_path, time_budget_s=1.5, max_batch=1)
    assert (run.written, run.answers) == (1, 3)
    t, ids, _ = read_answer_shard(shard_path(tmp_path, 0))
    assert ids == [j.id for j in JOBS[:3]] and len(answer_shards(tmp_path)) == 1


def test_bad_arguments_are_named(tiny_target, tmp_path) -> None:
    with pytest.raises(ValueError, match="max_batch"):
        _run(tiny_target, tmp_path, max_batch=0)
    with pytest.raises(ValueError, match="unique"):
        generate_answers(tiny_target, JOBS + JOBS[:1], tmp_path, chat=False)


def test_recorded_features_are_the_teacher_forced_ones(tiny_target, tmp_path) -> None:
    """The hidden states kept while generating equal one teacher-forced pass over prompt + answer
    (every position but the last); a recorder that skipped or shifted a step would fail."""
    from verispec.drafters.eagle_head import target_features

    _run(tiny_target, tmp_path, features=True)
    for p in answer_shards(tmp_path):
        t, ids, _ = read_answer_shard(p)
        assert t["features"].dtype == torch.float16
        for b in range(len(ids)):
            L = int(t["length"][b])
            seq = t["input_ids"][b : b + 1, :L].long()
            want = target_features(tiny_target.model, seq)[0]  # [L, H]
            got = t["features"][b]
            torch.testing.assert_close(got[: L - 1].float(), want[: L - 1].float(), atol=2e-3, rtol=2e-3)
            assert not got[L - 1 :].any()


def test_a_head_trains_on_answer_shards_and_reports_agreement_per_family(tmp_path) -> None:
    from verispec.distill.head import train_head
    from verispec.drafters.eagle_head import load_eagle_head, save_eagle_head
    from verispec.testing import tiny_eagle, tiny_llama

    tiny_target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)  # heads train in float32

    _run(tiny_target, tmp_path / "train", features=True)
    _run(tiny_target, tmp_path / "held", features=True)
    init = tiny_eagle(tiny_target, seed=1, vocab_map=torch.arange(0, 64, 2))
    save_eagle_head(init.head, tmp_path / "init", vocab_map=init.vocab_map)
    logs: list[str] = []
    summary = train_head(tiny_target, answer_shards(tmp_path / "train"), answer_shards(tmp_path / "held"),
                         tmp_path / "out", init_from=str(tmp_path / "init"), steps=4, lr=1e-2, held_eval=2,
                         seed=3, log=logs.append)
    assert set(summary["after"]) == {"chat", "math", "all"}
    assert (summary["seed"], summary["steps"], summary["lr"]) == (3, 4, 1e-2)  # the recipe, to rerun it
    assert summary["after"]["all"]["sequences"] == len(JOBS)
    assert summary["train_answer_positions"] == sum(1 for p in answer_shards(tmp_path / "train")
                                                    for g in read_answer_shard(p)[0]["generated"].flatten() if g)
    trained = load_eagle_head(tmp_path / "out")
    assert torch.equal(trained.vocab_map, init.vocab_map)
    changed = any(not torch.allclose(a.float(), b.float(), atol=1e-3)
                  for a, b in zip(trained.head.state_dict().values(), init.head.state_dict().values()))
    assert changed, "four steps at lr 1e-2 left the head as it was"


def test_family_weights_draw_every_family_equally_often() -> None:
    from verispec.distill.head import family_weights

    fams = ["rag"] * 6 + ["chat"] * 2 + ["qa"]
    w = family_weights(fams)
    assert w.tolist() == pytest.approx([1 / 6] * 6 + [1 / 2] * 2 + [1.0])
    draws = torch.multinomial(w, 9000, replacement=True, generator=torch.Generator().manual_seed(0))
    share = {f: sum(1 for i in draws.tolist() if fams[i] == f) / 9000 for f in set(fams)}
    assert all(abs(v - 1 / 3) < 0.03 for v in share.values()), share  # uniform draws: rag 2/3, qa 1/9
    with pytest.raises(ValueError, match="no sequences"):
        family_weights([])


def test_balanced_head_training_draws_by_family_weights(tmp_path, monkeypatch) -> None:
    """``balance="families"`` hands train_eagle the family weights of the training sequences in
    shard order; ``"none"`` hands it nothing (uniform); anything else is refused by name."""
    import verispec.distill.eagle_train as eagle_train
    from verispec.distill.answers import read_answer_index
    from verispec.distill.head import family_weights, train_head
    from verispec.drafters.eagle_head import save_eagle_head
    from verispec.testing import tiny_eagle, tiny_llama

    tiny_target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    jobs = [AnswerJob(f"b{i}", "chat" if i < 5 else "math", "a b c") for i in range(7)]  # 5 chat, 2 math
    generate_answers(tiny_target, jobs, tmp_path / "train", max_new_tokens=4, max_batch=3, shard_size=3, chat=False,
                     features=True)
    init = tiny_eagle(tiny_target, seed=1, vocab_map=torch.arange(0, 64, 2))
    save_eagle_head(init.head, tmp_path / "init", vocab_map=init.vocab_map)
    shards = answer_shards(tmp_path / "train")
    seen = []
    real = eagle_train.train_eagle
    def spy(*a, **kw):
        seen.append(kw["sample_weight"])
        return real(*a, **kw)

    monkeypatch.setattr(eagle_train, "train_eagle", spy)
    fams = [f for p in shards for f in read_answer_index(p)[1]]
    assert fams.count("chat") == 5
    for balance in ("families", "none"):
        summary = train_head(tiny_target, shards, shards, tmp_path / balance, init_from=str(tmp_path / "init"), steps=2,
                             held_eval=2, balance=balance, log=lambda _: None)
        assert summary["balance"] == balance and summary["train_families"] == {"chat": 5, "math": 2}
    assert torch.equal(seen[0], family_weights(fams)) and seen[1] is None
    with pytest.raises(ValueError, match="balance must be one of"):
        train_head(tiny_target, shards, shards, tmp_path / "bad", init_from=str(tmp_path / "init"), steps=1,
                   balance="family", log=lambda _: None)


def test_the_answer_vocab_map_holds_the_most_written_answer_tokens() -> None:
    from verispec.distill.head import answer_vocab_map, map_coverage
    from verispec.distill.eagle_train import FeatureSet

    ids = torch.tensor([[1, 2, 7, 7, 7, 9, 0], [3, 4, 8, 8, 9, 5, 0]])
    weight = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0, 0]], dtype=torch.uint8)  # 6 tokens each
    generated = torch.tensor([[0, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0, 0]], dtype=torch.uint8)  # answers from 2
    data = FeatureSet(ids, torch.zeros(2, 7, 4), weight, generated)
    # answer tokens: 7, 7, 7, 9 and 8, 8, 9, 5 -> counts 7:3, 8:2, 9:2, 5:1; prompt tokens never count
    assert answer_vocab_map(data, 2).tolist() == [7, 8]
    assert answer_vocab_map(data, 3, always=[0]).tolist() == [0, 7, 8]
    assert answer_vocab_map(data, 3, always=[7, 0]).tolist() == [0, 7, 8]  # a kept id is not counted twice
    assert answer_vocab_map(data, 9).tolist() == [5, 7, 8, 9]  # never a token the answers did not use
    cov = map_coverage(data, torch.tensor([7, 9]), ["a", "b"])
    assert cov == {"a": 1.0, "b": 0.25, "all": 5 / 8}


def test_the_command_names_a_bad_instruction_file(tmp_path, capsys) -> None:
    from verispec.distill.answers import main

    assert main(["--instructions", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "family": "chat", "text": "hi"}\n{"id": "b"}\n')
    assert main(["--instructions", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "missing.jsonl" in err and "bad.jsonl:2" in err
    assert not (tmp_path / "o").exists()


def test_verispec_distill_runs_the_data_tools(tmp_path, capsys) -> None:
    from verispec.cli import main

    assert main(["distill", "answers", "--instructions", str(tmp_path / "none.jsonl"), "--out", str(tmp_path)]) == 2
    assert "verispec distill answers: error" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["distill", "head", "--help"])
    assert "verispec distill head" in capsys.readouterr().out


def _head_training_inputs(tmp_path):
    """``(a tiny float32 target, its answer shards with features in tmp_path / "train", the initial
    head saved in tmp_path / "init")``."""
    from verispec.drafters.eagle_head import save_eagle_head
    from verispec.testing import tiny_eagle, tiny_llama

    tiny_target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    _run(tiny_target, tmp_path / "train", features=True)
    init = tiny_eagle(tiny_target, seed=1, vocab_map=torch.arange(0, 64, 2))
    save_eagle_head(init.head, tmp_path / "init", vocab_map=init.vocab_map)
    return tiny_target, answer_shards(tmp_path / "train"), init


def _train_on_a_fake_clock(tmp_path, monkeypatch, reads: list[float], budget_s: float) -> tuple[dict, list[int]]:
    """Train 400 steps within ``budget_s`` while the trainer's clock gives ``reads`` in turn:
    ``(the summary, the planned steps it logged)``."""
    import types

    import verispec.distill.eagle_train as eagle_train
    from verispec.distill.head import train_head

    tiny_target, shards, _ = _head_training_inputs(tmp_path)
    clock = iter(reads)
    monkeypatch.setattr(eagle_train, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    logs: list[str] = []
    summary = train_head(tiny_target, shards, shards, tmp_path / "out", init_from=str(tmp_path / "init"), steps=400,
                         time_budget_s=budget_s, held_eval=2, log=logs.append)
    plans = [int(line.split(" steps fit")[0].rsplit(" ", 1)[1])
             for line in logs if "steps fit the time budget" in line]
    return summary, plans


def test_a_time_budget_shortens_head_training_after_its_first_steps(tmp_path) -> None:
    from verispec.distill.head import train_head

    tiny_target, shards, _ = _head_training_inputs(tmp_path)
    summary = train_head(tiny_target, shards, shards, tmp_path / "out", init_from=str(tmp_path / "init"), steps=400,
                         time_budget_s=1e-6, held_eval=2, log=lambda _: None)
    assert summary["steps"] == 20 and summary["train"]["eval"]["step"] == 20


def test_steps_within_a_budget_follow_the_pace_so_far() -> None:
    from verispec.distill.eagle_train import steps_within

    assert steps_within(100, 20, 20, 20, 1000) == 100  # 1 s per step: 80 more
    assert steps_within(100, 60, 40, 40, 100) == 66  # slowed to 1.5 s per step: 26 more
    assert steps_within(10, 60, 40, 40, 100) == 40  # over budget already: stop here, never go back
    assert steps_within(1e9, 20, 20, 20, 300) == 300  # never more than asked
    assert steps_within(100, 20, 20, 520, 10_000) == 600  # resumed at 520: this run's pace and time


def test_a_machine_that_slows_mid_run_shortens_head_training_again(tmp_path, monkeypatch) -> None:
    """The budget is re-read every 20 steps: a clock that runs at 1 s per step for the first 20 and
    at 4 s per step after lowers the planned steps again (one estimate after 20 steps would keep
    the first plan, 100 steps, and overrun the budget)."""
    reads = [0.0, 20.0] + [20.0 + 80.0 * k for k in range(1, 1000)]  # t0, step 20, then every 20 steps
    summary, plans = _train_on_a_fake_clock(tmp_path, monkeypatch, reads, budget_s=100)
    assert plans[0] == 100
    assert summary["steps"] < 100 and len(plans) >= 2


def test_a_slow_start_gives_its_steps_back_when_the_pace_recovers(tmp_path, monkeypatch) -> None:
    """First steps at 4 s each (features still on disk), then 1 s each: the plan after 20 steps
    (100 of 400 asked in a 400 s budget) rises again as the pace recovers and never passes the
    steps asked. (Only lowering the plan would stop at 100 steps, 160 s into the budget.)"""
    reads = [0.0, 80.0] + [80.0 + 20.0 * k for k in range(1, 1000)]  # t0, step 20, then every 20 steps
    summary, plans = _train_on_a_fake_clock(tmp_path, monkeypatch, reads, budget_s=400)
    assert plans[0] == 100 and max(plans) > 200
    assert 200 < summary["steps"] < 400  # 252: each evaluation's clock read costs the fake clock 20 s too


def test_bfloat16_autocast_training_keeps_float32_weights_and_follows_the_float32_run(tmp_path) -> None:
    """Training with the forward's matrix products in bfloat16 moves the head as float32 training
    does (close), yet not identically (so the autocast really ran), and keeps float32 weights."""
    from verispec.distill.head import train_head
    from verispec.drafters.eagle_head import load_eagle_head

    tiny_target, shards, init = _head_training_inputs(tmp_path)
    heads = {}
    for name, autocast in (("fp32", None), ("bf16", torch.bfloat16)):
        summary = train_head(tiny_target, shards, shards, tmp_path / name, init_from=str(tmp_path / "init"), steps=3,
                             lr=1e-2, held_eval=2, autocast=autocast, log=lambda _: None)
        assert summary["autocast"] == (None if autocast is None else "torch.bfloat16")
        heads[name] = load_eagle_head(tmp_path / name).head.state_dict()
    start = init.head.state_dict()
    moved = sum(float((heads["fp32"][k].float() - start[k].float()).abs().sum()) for k in start)
    apart = sum(float((heads["bf16"][k].float() - heads["fp32"][k].float()).abs().sum()) for k in start)
    assert all(v.dtype == torch.float32 for v in heads["bf16"].values() if v.is_floating_point())
    assert 0 < apart < 0.2 * moved, (apart, moved)


def test_feature_sets_load_shards_of_different_lengths_padded_with_zeros(tmp_path) -> None:
    """Loaded one shard at a time into preallocated tensors: the same as padding every shard to
    the longest and concatenating (written here apart from the loader), in shard order."""
    from safetensors.torch import save_file

    from verispec.distill.eagle_train import FeatureSet

    g = torch.Generator().manual_seed(3)
    shards = []
    for i, (n, t) in enumerate(((2, 5), (3, 9), (1, 4))):
        d = {"input_ids": torch.randint(1, 50, (n, t), generator=g, dtype=torch.int32),
             "features": torch.randn(n, t, 6, generator=g).half(),
             "weight": torch.ones(n, t, dtype=torch.uint8), "generated": torch.randint(0, 2, (n, t), generator=g,
                                                                                      dtype=torch.uint8)}
        save_file(d, str(tmp_path / f"s{i}.safetensors"))
        shards.append(d)
    got = FeatureSet.load([tmp_path / f"s{i}.safetensors" for i in range(3)])
    assert got.features.shape == (6, 9, 6) and got.features.dtype == torch.float16
    for k in ("input_ids", "features", "weight", "generated"):
        pad = [torch.nn.functional.pad(d[k], (0, 0, 0, 9 - d[k].shape[1]) if d[k].ndim == 3 else (0, 9 - d[k].shape[1]))
               for d in shards]
        assert torch.equal(getattr(got, k), torch.cat(pad)), k
    assert int(got.weight[0, 5:].sum()) == 0 and int(got.weight[2, :].sum()) == 9  # padding: weight 0


def test_on_pass_reports_every_target_pass_with_rows_and_columns(tiny_target, tmp_path) -> None:
    records = []
    run = _run(tiny_target, tmp_path, on_pass=records.append)
    assert run.answers == len(JOBS)
    passes = [r["passes"] for r in records]
    assert passes == sorted(set(passes)) and passes[0] >= 1
    assert passes[-1] >= 6 - 1  # an answer of up to 6 tokens: its first from the prefill, then a pass each
    assert all(0 <= r["rows"] <= 3 and r["pass_s"] >= 0 for r in records)
    assert all(r["columns"] >= 1 for r in records if r["rows"])  # an emptied batch holds no column
    assert max(r["rows"] for r in records) == 3  # max_batch rows in flight at some pass


def test_a_trace_in_a_missing_folder_is_named_before_any_work(tmp_path, capsys) -> None:
    from verispec.distill.answers import main

    inst = tmp_path / "i.jsonl"
    inst.write_text('{"id": "a", "family": "chat", "text": "hi"}\n')
    code = main(["--instructions", str(inst), "--out", str(tmp_path / "o"), "--trace", str(tmp_path / "no" / "t.jsonl")])
    assert code == 2 and "--trace" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_the_top1_weight_reaches_training_and_its_record(tmp_path) -> None:
    """``top1_weight`` changes what a few steps learn (the cross-entropy at the target's argmax is
    in the loss) and is recorded beside the recipe; 0 is the KL-only training."""
    from verispec.distill.head import train_head
    from verispec.drafters.eagle_head import load_eagle_head

    tiny_target, shards, _ = _head_training_inputs(tmp_path)
    heads = {}
    for w in (0.0, 2.0):
        summary = train_head(tiny_target, shards, shards, tmp_path / f"out{w}", init_from=str(tmp_path / "init"),
                             steps=4, lr=1e-2, held_eval=2, seed=3, top1_weight=w, log=lambda _: None)
        assert summary["top1_weight"] == w
        heads[w] = load_eagle_head(tmp_path / f"out{w}").head.state_dict()
    assert any(not torch.equal(heads[0.0][k], heads[2.0][k]) for k in heads[0.0])


@pytest.mark.parametrize("bad", ["-1", "nan", "1000"])
def test_distill_head_refuses_a_bad_top1_weight(capsys, bad) -> None:
    from verispec.distill.head import main

    assert main(["--train", "nowhere", "--heldout", "nowhere", "--out", "x", "--top1-weight", bad]) == 2
    err = capsys.readouterr().err
    assert "--top1-weight must be in 0..100" in err and f"got {float(bad)}" in err


def test_an_answers_opening_is_counted_per_answer_and_weighted() -> None:
    """``answer_index`` restarts at every run of generated positions (a second turn's answer
    starts at 0 again), and ``opening = (n, x)`` multiplies the weight of each answer's first n
    positions by x, leaving prompts, later positions and the weight's zeros as they were."""
    from verispec.distill.eagle_train import FeatureSet, _position_weight, answer_index

    generated = torch.tensor([[0, 0, 1, 1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0, 0, 0]], dtype=torch.uint8)
    assert answer_index(generated).tolist() == [[-1, -1, 0, 1, 2, -1, 0, 1, 2], [0, 1, 2, 3, -1, -1, -1, -1, -1]]
    weight = torch.ones(2, 9, dtype=torch.uint8)
    weight[0, 8] = 0  # after an EOS
    b = FeatureSet(torch.zeros(2, 9, dtype=torch.int32), torch.zeros(2, 9, 4), weight, generated)
    assert torch.equal(_position_weight(b, True), weight.float() * generated.float())
    assert _position_weight(b, True, (2, 3.0)).tolist() == [[0, 0, 3, 3, 1, 0, 3, 3, 0], [3, 3, 1, 1, 0, 0, 0, 0, 0]]
    assert _position_weight(b, False, (1, 0.5)).tolist() == [[1, 1, 0.5, 1, 1, 1, 0.5, 1, 0], [0.5, 1, 1, 1, 1, 1, 1, 1, 1]]
    assert torch.equal(_position_weight(b, True, (0, 3.0)), _position_weight(b, True))


def test_the_opening_weight_reaches_training_and_its_record(tmp_path) -> None:
    """An opening weight changes what a few steps learn, and the summary records it."""
    from verispec.distill.head import train_head
    from verispec.drafters.eagle_head import load_eagle_head

    tiny_target, shards, _ = _head_training_inputs(tmp_path)
    heads = {}
    for opening in ((0, 1.0), (2, 5.0)):
        out = tmp_path / f"out{opening[0]}"
        summary = train_head(tiny_target, shards, shards, out, init_from=str(tmp_path / "init"), steps=4, lr=1e-2,
                             held_eval=2, seed=3, opening=opening, log=lambda _: None)
        assert summary["opening"] == {"tokens": opening[0], "weight": opening[1]}
        heads[opening] = load_eagle_head(out).head.state_dict()
    a, b = heads.values()
    assert any(not torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("flag, bad, words", [("--opening-tokens", "-1", "--opening-tokens must be in 0..100000"),
                                              ("--opening-weight", "0", "--opening-weight must be in (0, 100]"),
                                              ("--opening-weight", "nan", "--opening-weight must be in (0, 100]")])
def test_distill_head_refuses_a_bad_opening(capsys, flag, bad, words) -> None:
    from verispec.distill.head import main

    assert main(["--train", "nowhere", "--heldout", "nowhere", "--out", "x", flag, bad]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("flag, bad, words", [("--depth", "0", "--depth must be in 1..16"),
                                              ("--depth", "17", "--depth must be in 1..16"),
                                              ("--steps", "0", "--steps must be in 1..10000000"),
                                              ("--lr", "0", "--lr must be in (0, 1]"),
                                              ("--lr", "nan", "--lr must be in (0, 1]"),
                                              ("--batch-size", "0", "--batch-size must be in 1..4096"),
                                              ("--time-budget", "-1", "--time-budget must be >= 0"),
                                              ("--time-budget", "inf", "--time-budget must be >= 0"),
                                              ("--map-size", "-5", "--map-size must be >= 0"),
                                              ("--max-shards", "-1", "--max-shards must be >= 0")])
def test_distill_head_refuses_bad_training_flags(capsys, flag, bad, words) -> None:
    """Each refused before any shard is read (the folders here do not exist), the flag named."""
    from verispec.distill.head import main

    assert main(["--train", "nowhere", "--heldout", "nowhere", "--out", "x", flag, bad]) == 2
    err = capsys.readouterr().err
    assert words in err and "nowhere" not in err
