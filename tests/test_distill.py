"""Tests for verispec.distill: a tiny end-to-end distillation, resume, the shipped draft, and
exactness of reduced-vocabulary drafts through the engine."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from scipy import stats
from transformers import AutoModelForCausalLM

from verispec import distill as D
from verispec.drafters import EagleDrafter, HybridDrafter, ModelDrafter
from verispec.drafters.eagle_head import load_eagle_head
from verispec.engine import SpeculativeDecoder
from verispec.models import DRAFT_DIR, CausalLM, _slice_head, load_causal_lm
from verispec.sampling import SamplingParams
from verispec.testing import EOS_ID, save_tiny_llama, tiny_llama

TINY = dict(arch="llama-l1-h32-i64", vocab_size=24, label_tokens=512, self_distill_prompts=4, stdlib=False,
            shard_seqs=4, gen_batch=4, heldout_tokens=256, heldout_prompts=4, seq_len=64, prompt_len=16,
            batch_size=4, eval_every=10, ckpt_every=10, progress=False, threads=1)


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A tiny target, a small text corpus and a labelled output dir (labels only, shared)."""
    root = tmp_path_factory.mktemp("distill")
    target = save_tiny_llama(root / "target", vocab_size=64, hidden=32, layers=2, seed=1, dtype=torch.float32)
    rng = random.Random(0)
    words = ["def", "return", "self", "import", "print", "for", "in", "range", "if", "else"]
    corpus = root / "corpus"
    corpus.mkdir()
    for f in range(8):
        lines = (" ".join(rng.choice(words) for _ in range(6)) for _ in range(60))
        (corpus / f"f{f}.txt").write_text("\n".join(lines))
    for f in range(3):  # documented functions: what chat prompts are built from
        (corpus / f"m{f}.py").write_text("".join(
            f'def add_{f}_{i}(a, b):\n    """Return a plus b."""\n    c = a + b\n    return c\n\n\n' for i in range(4)))
    labelled = root / "labelled"
    s = D.distill(str(target), [str(corpus)], str(labelled), stages=["label"], **TINY)
    assert s["labels"]["shards_missing"] == 0
    return target, corpus, labelled


def _copy_labels(labelled: Path, out: Path) -> None:
    shutil.copytree(labelled / "labels", out / "labels")


def test_tiny_distillation_lowers_kl_and_exports(tiny_setup, tmp_path: Path) -> None:
    target, corpus, labelled = tiny_setup
    out = tmp_path / "draft"
    _copy_labels(labelled, out)
    s = D.distill(str(target), [str(corpus)], str(out), steps=40, **TINY)
    assert s["labels"]["shards_written"] == 0  # everything was cached on disk
    hist = s["train"]["history"]
    assert hist[-1]["kl_all"] < 0.8 * hist[0]["kl_all"]
    assert s["data"]["train_generated_tokens"] > 0
    assert 0 < s["cost"]["c"] < 10
    # verispec's view: a head of vocab_map rows scoring target ids; HF's view: the full tied head.
    draft = load_causal_lm(out)
    vmap = draft.vocab_map
    assert vmap is not None and len(vmap) == 24
    assert torch.equal(vmap, torch.unique(vmap)) and int(vmap.max()) < 64  # sorted, unique, in range
    assert draft.model.get_output_embeddings().weight.shape[0] == 24
    hf = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert hf.config.vocab_size == 64 and hf.get_output_embeddings().weight.shape[0] == 64
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        full = hf.float()(ids).logits[0, -1]
        sliced = draft.model(ids).logits[0, -1]
    torch.testing.assert_close(full[vmap], sliced, atol=1e-4, rtol=1e-4)


def test_resume_matches_an_uninterrupted_run(tiny_setup, tmp_path: Path) -> None:
    target, corpus, labelled = tiny_setup
    kw = dict(TINY, stages=["label", "train"], measure=False)
    straight, paused = tmp_path / "straight", tmp_path / "paused"
    for d in (straight, paused):
        _copy_labels(labelled, d)
    a = D.distill(str(target), [str(corpus)], str(straight), steps=20, **kw)
    D.distill(str(target), [str(corpus)], str(paused), steps=20, pause_at=10, **kw)
    ckpt = paused / "checkpoints" / "last.safetensors"
    assert ckpt.is_file()
    b = D.distill(str(target), [str(corpus)], str(paused), steps=20, **kw)
    wa = load_file(straight / "checkpoints" / "last.safetensors")
    wb = load_file(ckpt)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=1e-4)
    assert abs(a["train"]["eval"]["kl_all"] - b["train"]["eval"]["kl_all"]) < 1e-4


def test_arch_parsing() -> None:
    assert D.parse_arch("llama-l2-h128-i384") == {"layers": 2, "hidden": 128, "intermediate": 384}
    assert D.parse_arch("llama-l3-h64") == {"layers": 3, "hidden": 64, "intermediate": 192}
    for bad in ("gpt-l2-h128", "llama-h128", "llama-l2-h100", "llama-l2-hx"):
        with pytest.raises(ValueError):
            D.parse_arch(bad)


@pytest.mark.parametrize("setting, bad, words", [("steps", 0, "steps (--steps) must be an int >= 1, got 0"),
                                                  ("batch_size", -2, "batch_size (--batch-size) must be an int >= 1"),
                                                  ("depth", 0, "depth (--depth) must be an int >= 1"),
                                                  ("label_tokens", -1, "label_tokens (--label-tokens) must be an int >= 0"),
                                                  ("chat_prompts", 1.5, "chat_prompts (--chat-prompts) must be an int"),
                                                  ("lr", 0.0, "lr (--lr) must be a finite number > 0"),
                                                  ("lr", float("nan"), "lr (--lr) must be a finite number > 0"),
                                                  ("chat_weight", -1.0, "chat_weight (--chat-weight) must be a finite"),
                                                  ("time_budget_s", float("inf"), "(--label-seconds) must be a finite"),
                                                  ("threads", -1, "threads (--threads) must be an int >= 0")])
def test_bad_settings_are_refused_by_name_before_anything_is_written(tmp_path: Path, setting, bad, words) -> None:
    out = tmp_path / "out"
    with pytest.raises(ValueError) as e:
        D.distill("smollm2-135m", [], str(out), **{setting: bad})
    assert words in str(e.value)
    assert not out.exists()


def test_the_distill_command_names_a_bad_flag(tmp_path: Path, capsys) -> None:
    from verispec.distill.command import main

    assert main(["--out", str(tmp_path / "out"), "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- exactness


def _reduced_draft(vmap: torch.Tensor, seed: int = 7) -> CausalLM:
    lm = tiny_llama(vocab_size=64, hidden=32, layers=1, seed=seed, dtype=torch.float64)
    _slice_head(lm.model, vmap)  # what load_causal_lm does for a draft dir with a vocab_map
    return CausalLM(lm.model, lm.tokenizer, "tiny-reduced", vocab_map=vmap)


def test_reduced_vocab_draft_is_exact_greedy() -> None:
    target = tiny_llama(vocab_size=64, hidden=32, layers=2, seed=1, dtype=torch.float64)
    vmap = torch.arange(4, 64, 2)  # half the vocabulary: q = 0 on the rest
    prompts = ["def f(x):", "hello world", "a b c a b"]
    greedy = SamplingParams(temperature=0.0)
    ref = SpeculativeDecoder(target, None).generate(prompts, 40, greedy)
    for drafter in (ModelDrafter(_reduced_draft(vmap)), HybridDrafter(ModelDrafter(_reduced_draft(vmap)))):
        out = SpeculativeDecoder(target, drafter, k=4).generate(prompts, 40, greedy)
        assert out.token_ids == ref.token_ids
        assert out.stats.drafted > 0


def test_reduced_vocab_draft_first_token_g_test() -> None:
    """The first drafted token's slot (token 1: token 0 comes from the prefill, then one drafted,
    verified token) is distributed as the target's law there, sum over x of p(x) p(. | x)."""
    target = tiny_llama(vocab_size=64, hidden=32, layers=2, seed=1, dtype=torch.float64)
    vmap = torch.arange(4, 64, 3)
    dec = SpeculativeDecoder(target, ModelDrafter(_reduced_draft(vmap)), k=1)
    prompt = dec.encode(["abc d"])[0]
    n = 3000
    res = dec.generate([prompt] * n, 3, SamplingParams(temperature=1.0), seeds=list(range(n)))
    assert res.stats.drafted > 0 and res.stats.accepted < res.stats.drafted  # both branches taken
    ended = 64  # the outcome "token 0 was EOS: no token 1"
    second = torch.tensor([t[1] if len(t) > 1 else ended for t in res.token_ids])
    with torch.no_grad():
        p0 = torch.softmax(target.model(torch.tensor([prompt])).logits[0, -1], -1)  # [V]
        ctx = torch.tensor([prompt + [x] for x in range(64)])
        p_next = torch.softmax(target.model(ctx).logits[:, -1], -1)  # [V, V]
    going = p0.clone()
    going[EOS_ID] = 0.0
    p = torch.cat([going @ p_next, p0[EOS_ID, None]])  # [V + 1]: token 1's law
    counts = torch.bincount(second, minlength=65).double()
    expected = p * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    g = stats.power_divergence(obs[keep].numpy(), exp[keep].numpy(), lambda_="log-likelihood")
    assert g.pvalue > 1e-3, (g, obs, exp)


# ---------------------------------------------------------------------------------------------- shipped draft


@pytest.mark.skipif(not (DRAFT_DIR / "config.json").is_file(), reason="no shipped draft")
def test_shipped_draft_files() -> None:
    size = sum(f.stat().st_size for f in DRAFT_DIR.rglob("*") if f.is_file())
    assert size <= 20_000_000
    vmap = load_file(DRAFT_DIR / "vocab_map.safetensors")["vocab_map"]
    assert vmap.dtype == torch.int64 and vmap.ndim == 1
    assert torch.equal(vmap, torch.unique(vmap))  # sorted ascending, no repeats
    assert int(vmap.min()) >= 0 and int(vmap.max()) < 49152
    draft = load_causal_lm(DRAFT_DIR)
    assert len(draft.tokenizer) == 49152
    assert draft.model.get_input_embeddings().num_embeddings == 49152
    assert draft.model.get_output_embeddings().weight.shape[0] == len(vmap)
    assert draft.tokenizer.eos_token_id in set(vmap.tolist())
    assert (DRAFT_DIR / "MODEL_CARD.md").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not (DRAFT_DIR / "config.json").is_file(), reason="no shipped draft")
def test_shipped_draft_is_exact_with_the_real_target() -> None:

    target = load_causal_lm("smollm2-135m")
    draft = load_causal_lm(DRAFT_DIR)
    prompt = ["def is_prime(n):\n    "]
    greedy = SamplingParams(temperature=0.0)
    ref = SpeculativeDecoder(target, None).generate(prompt, 24, greedy)
    out = SpeculativeDecoder(target, ModelDrafter(draft), k=4).generate(prompt, 24, greedy)
    assert out.token_ids == ref.token_ids
    assert out.stats.accepted > 0


def test_tiny_eagle_distillation_learns_and_exports(tiny_setup, tmp_path: Path) -> None:
    target, corpus, labelled = tiny_setup
    out = tmp_path / "eagle"
    _copy_labels(labelled, out)
    kw = dict(TINY, arch="eagle", depth=2, chat_prompts=8, heldout_chat_prompts=4, chat_batch=4, chat_len=96,
              chat_new_tokens=24)
    s = D.distill(str(target), [str(corpus)], str(out), steps=40, **kw)
    assert s["labels"]["shards_written"] == 3  # only the chat shards were missing (2 train + 1 held-out)
    chat = load_file(out / "labels" / "train-chat-00000.safetensors")
    assert chat["input_ids"].shape == (4, 96) and int(chat["generated"].sum()) > 0
    assert set(s["acceptance"]) == {"code", "chat", "grounded"}
    hist = s["train"]["history"]
    assert hist[-1]["kl"] < 0.8 * hist[0]["kl"]
    assert hist[-1]["agree"][0] > hist[0]["agree"][0]
    assert (out / "eagle.safetensors").is_file() and (out / "vocab_map.safetensors").is_file()
    assert (out / "features").is_dir() and 0 < s["cost"]["c"] < 10
    # Resumable: a second run finds the checkpoint and the features and trains no further.
    s2 = D.distill(str(target), [str(corpus)], str(out), steps=40, **dict(kw, measure=False))
    assert s2["train"]["eval"]["step"] == 40
    # The exported head drafts for the target, exactly.
    tgt = load_causal_lm(target)
    sp = SamplingParams(temperature=0)
    got = SpeculativeDecoder(tgt, EagleDrafter(load_eagle_head(out)), k=3).generate(["def return"], 16, sp)
    want = SpeculativeDecoder(tgt, None).generate(["def return"], 16, sp)
    assert got.token_ids == want.token_ids


def test_eagle_fine_tune_starts_from_the_given_head(tiny_setup, tmp_path: Path) -> None:
    target, corpus, labelled = tiny_setup
    kw = dict(TINY, arch="eagle", depth=2, chat_prompts=4, heldout_chat_prompts=4, chat_batch=4, chat_len=96,
              chat_new_tokens=24, measure=False)
    first = tmp_path / "first"
    _copy_labels(labelled, first)
    s1 = D.distill(str(target), [str(corpus)], str(first), steps=30, **kw)
    ft = tmp_path / "ft"
    shutil.copytree(first / "labels", ft / "labels")  # the chat answers too: nothing to generate again
    s2 = D.distill(str(target), [str(corpus)], str(ft), steps=10, **dict(kw, init_from=str(first), lr=1e-5))
    assert s2["labels"]["shards_written"] == 0
    # A tiny learning rate barely moves the weights: the first evaluation is the given head's, not a fresh one's.
    kl_fresh, kl_given, kl_ft = (s1["train"]["history"][0]["kl"], s1["train"]["eval"]["kl"],
                                 s2["train"]["history"][0]["kl"])
    assert abs(kl_ft - kl_given) < 0.05 * kl_given < abs(kl_fresh - kl_given)
    assert torch.equal(load_file(ft / "vocab_map.safetensors")["vocab_map"],
                       load_file(first / "vocab_map.safetensors")["vocab_map"])
    with pytest.raises(ValueError, match="init_from"):
        D.distill(str(target), [str(corpus)], str(tmp_path / "x"), steps=1, **dict(TINY, init_from=str(first)))
    with pytest.raises(ValueError, match="not an EAGLE head"):
        D.distill(str(target), [str(corpus)], str(tmp_path / "y"), steps=1, **dict(kw, init_from=str(corpus)))
    with pytest.raises(ValueError, match="made for another target"):  # the built-in head is SmolLM2-135M's
        D.distill(str(target), [str(corpus)], str(tmp_path / "z"), steps=1, **dict(kw, init_from="eagle"))
    assert not (tmp_path / "z" / "labels").exists()  # refused before any labelling
