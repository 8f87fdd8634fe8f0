"""EAGLE heads: the training-time-test unrolling equals drafting, files round-trip, bad input is
refused. (The tiny ``distill --arch eagle`` run is in test_distill.py, beside its labelled corpus.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from verispec.drafters import EAGLE_BUILTINS, EAGLE_DRAFT, EagleDrafter, load_drafter
from verispec.drafters.eagle_head import (EagleDraftModel, bind_eagle, features_match_logits, is_eagle_dir, load_eagle_head,
                            save_eagle_head, target_features)
from verispec.distill.eagle_train import ttt_mask, unrolled_predictions
from verispec.engine import SpeculativeDecoder
from verispec.models import ModelLoadError
from verispec.kv import KVRunner
from verispec.sampling import SamplingParams
from verispec.testing import tiny_eagle, tiny_llama


def _draft_model(target, seed=0):
    files = tiny_eagle(target, seed=seed, scale=0.5)
    return files, EagleDraftModel(files.head, target.model.get_input_embeddings(),
                                  target.model.get_output_embeddings().weight.detach())


def test_ttt_mask_step1_is_causal_and_later_steps_chain() -> None:
    T = 6
    allowed = ttt_mask(T, 1)[0, 0] == 0
    assert torch.equal(allowed, torch.tril(torch.ones(T, T, dtype=torch.bool)))
    a3 = (ttt_mask(T, 3)[0, 0] == 0).reshape(T, 3, T)  # [query, block, key position]
    i = 4  # the step-3 pair at position 4: real pairs <= 2, the step-2 pair at 3, itself
    assert a3[i, 0].nonzero().flatten().tolist() == [0, 1, 2]
    assert a3[i, 1].nonzero().flatten().tolist() == [3]
    assert a3[i, 2].nonzero().flatten().tolist() == [4]


@pytest.mark.parametrize("n", [0, 3, 7])
def test_unrolled_training_steps_equal_what_the_drafter_computes(tiny_target, n) -> None:
    """Step s of the batched training pass at position n+s-1 == drafting s steps after the real
    pairs up to position n (real features to f_{n-1}, then the head's own features)."""
    _, dm = _draft_model(tiny_target)
    ids = torch.randint(4, 64, (2, 12), generator=torch.Generator().manual_seed(n))
    with torch.no_grad():
        f = target_features(tiny_target.model, ids)
        outs = unrolled_predictions(dm.head, dm.embed, f, ids, depth=3)
        runner = KVRunner(dm, 2)
        prev = torch.cat([torch.zeros_like(f[:, :1]), f[:, :-1]], dim=1)
        _, f_hat = runner.forward(ids[:, : n + 1], return_hidden=True, features=prev[:, : n + 1])
        chain = [f_hat[:, -1]]
        for s in (2, 3):
            _, f_hat = runner.forward(ids[:, n + s - 1 : n + s], return_hidden=True, features=chain[-1][:, None])
            chain.append(f_hat[:, -1])
    for s in (1, 2, 3):
        torch.testing.assert_close(chain[s - 1], outs[s - 1][:, n + s - 1], atol=1e-10, rtol=1e-10)
    assert not torch.allclose(chain[1], outs[1][:, n + 2])  # (the comparison can fail)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("dtype,weights", [(torch.float64, "auto"), (torch.float32, "fp32"),
                                           (torch.float32, "fp16"), (torch.float32, "int8")])
def test_fast_draft_step_equals_the_hf_modules(dtype, weights, layers) -> None:
    """The drafting path (``_FastStep``: straight tensor code; oneDNN-packed float32 weights, or
    float16 copies) gives the HF modules' logits and features, for heads of one and two decoder
    layers: a ragged prefill (holes -> mask), a two-token feed without holes (causal mask of its
    own), one-token steps, and rows rolled back apart."""
    from verispec.models import fp16_linear, int8_linear

    if weights == "fp16" and fp16_linear(torch.zeros(2, 2)) is None:
        pytest.skip("this torch build has no fbgemm float16 linear")
    if weights == "int8" and int8_linear(torch.zeros(8, 32)) is None:
        pytest.skip("this torch build has no int8 weight kernel")
    target = tiny_llama(vocab_size=64, seed=0, dtype=dtype)
    files = tiny_eagle(target, seed=2, vocab_map=torch.arange(0, 64, 3), layers=layers)
    fast = bind_eagle(files, target, weights=weights)
    ref = bind_eagle(files, target, weights="fp32")
    ref._step = None  # forward_hidden falls back to reference_forward_hidden
    assert fast._step is not None and fast.fp16 == (weights == "fp16")
    assert fast.weights == ("fp32" if weights == "auto" else weights)
    tol = {torch.float64: dict(atol=1e-10, rtol=1e-10), torch.float32: dict(atol=2e-5, rtol=2e-5)}[dtype]
    if weights == "fp16":  # one rounding of every weight to float16 (11 significant bits)
        tol = dict(atol=2e-3, rtol=2e-3)
    if weights == "int8":  # int8 weights (a scale per row; torch's fallback kernel also rounds inputs to bfloat16)
        tol = dict(atol=0.1, rtol=0.05)
    H = target.model.config.hidden_size
    gen = torch.Generator().manual_seed(0)
    runners = [KVRunner(fast, 2), KVRunner(ref, 2)]

    def step(tokens, live=None, keep=0):
        feats = torch.randn(*tokens.shape, H, generator=gen, dtype=torch.float64).to(dtype)
        (lf, ff), (lr, fr) = (r.forward(tokens, live, logits_to_keep=keep, return_hidden=True, features=feats)
                              for r in runners)
        torch.testing.assert_close(lf, lr, **tol)
        torch.testing.assert_close(ff, fr, **tol)
        assert lf.shape == (2, keep or tokens.shape[1], 22)

    ids = torch.randint(4, 64, (2, 7), generator=gen)
    live = torch.ones(2, 7, dtype=torch.bool)
    live[1, :3] = False  # row 1 is 3 tokens shorter (left-padded)
    step(ids, live)
    for _ in range(3):
        step(torch.randint(4, 64, (2, 1), generator=gen), keep=1)
    for r in runners:
        r.truncate(torch.tensor([5, 3]))  # roll the rows back by different amounts: holes
    step(torch.randint(4, 64, (2, 2), generator=gen), keep=1)
    step(torch.randint(4, 64, (2, 1), generator=gen))
    one = [KVRunner(fast, 1), KVRunner(ref, 1)]  # one row: no mask from the runner
    ids = torch.randint(4, 64, (1, 5), generator=gen)
    feats = torch.randn(1, 5, H, generator=gen, dtype=torch.float64).to(dtype)
    out = [r.forward(ids[:, :3], return_hidden=True, features=feats[:, :3]) for r in one]
    out2 = [r.forward(ids[:, 3:], return_hidden=True, features=feats[:, 3:]) for r in one]  # 2 queries on a cache
    for a, b in (out, out2):
        torch.testing.assert_close(a[0], b[0], **tol)
        torch.testing.assert_close(a[1], b[1], **tol)


def test_float16_draft_weights_keep_greedy_output_exact() -> None:
    """A float32 target drafted by the head's float16 weights (alone and behind prompt lookup):
    greedy output still equals target-only decoding."""
    from verispec.drafters import HybridDrafter
    from verispec.models import fp16_linear

    if fp16_linear(torch.zeros(2, 2)) is None:
        pytest.skip("this torch build has no fbgemm float16 linear")
    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    prompts = ["hello world hello wor", "abc abc abc abc", "x"]
    greedy = SamplingParams(temperature=0)
    ref = SpeculativeDecoder(target, None).generate(prompts, 20, greedy).token_ids
    files = tiny_eagle(target, seed=3)
    for drafter in (EagleDrafter(files, weights="fp16"), HybridDrafter(EagleDrafter(files, weights="fp16"))):
        dec = SpeculativeDecoder(target, drafter, k=3)
        eagle = drafter.model if isinstance(drafter, HybridDrafter) else drafter
        assert eagle.model.fp16
        res = dec.generate(prompts, 20, greedy)
        assert res.token_ids == ref and res.stats.drafted > 0


def test_draft_steps_use_cpu_kernels_only_on_the_cpu(monkeypatch) -> None:
    """A bound head packs (or float16-copies) its weights on the CPU; on another device (here
    "meta") it keeps plain ``F.linear`` matmuls, "auto" means fp32 there (measured or fixed
    choice) and "fp16" is refused."""
    from verispec.drafters import eagle_head as eagle
    from verispec.models import fp16_linear

    calls: list[str] = []
    real_pack, real_half = eagle.pack_weight, eagle.fp16_linear
    monkeypatch.setattr(eagle, "pack_weight", lambda w, *a: calls.append("pack") or real_pack(w, *a))
    monkeypatch.setattr(eagle, "fp16_linear", lambda w, b=None: calls.append("fp16") or real_half(w, b))
    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    files = tiny_eagle(target, seed=2)
    fp32 = bind_eagle(files, target, weights="fp32")
    assert fp32._step.cpu and calls == ["pack"] * 9 and not fp32.fp16  # fc, q, k, v, o, gate, up, down, out
    calls.clear()
    monkeypatch.setenv("VERISPEC_KERNEL_CHOICE", "fixed")  # "auto" = fp16 where fbgemm exists, untimed
    auto = bind_eagle(files, target)
    has_fbgemm = fp16_linear(torch.zeros(2, 2)) is not None
    assert auto.fp16 == has_fbgemm and calls[:9] == ["fp16"] * 9

    target.model.to("meta")
    for choice in ("fixed", "measured"):
        monkeypatch.setenv("VERISPEC_KERNEL_CHOICE", choice)
        calls.clear()
        meta = bind_eagle(files, target)
        assert meta.device.type == "meta" and next(meta.head.parameters()).device.type == "meta"
        assert meta._step is not None and not meta._step.cpu and not meta.fp16 and calls == []
    with pytest.raises(ValueError, match="CPU"):
        bind_eagle(files, target, weights="fp16")
    assert calls == []


def test_measured_draft_weights_are_chosen_by_timing(monkeypatch, tmp_path: Path) -> None:
    """``weights="measured"`` (an opt-in: "auto" is a rule on the CPU's flags) times a one-row draft step's matmuls with each kind of draft weights
    this build runs (float32, float16, int8), each after flushing the CPU's caches, once per
    machine, and takes the fastest (cached: a second bind times nothing); a target no other
    kind can serve (float64) is not timed."""
    from verispec.models import fp16_linear, int8_linear, kernel_report, kernels

    kinds = ["fp32"] + [k for k, make in (("fp16", fp16_linear), ("int8", int8_linear))
                        if make(torch.zeros(8, 32)) is not None]
    if len(kinds) == 1:
        pytest.skip("this torch build has neither fbgemm float16 nor int8 weight kernels")

    def faster(name):
        def fake(calls, repeats=3, rivals=None, before=None):
            fake.seen.append(list(calls))
            fake.flushed = before is not None
            return {k: 1.0 if k == name else 2.0 for k in calls}
        fake.seen = []
        return fake

    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    files = tiny_eagle(target, seed=2, vocab_map=torch.arange(0, 64, 3))
    for fast in kinds:
        other = next(k for k in kinds if k != fast)
        monkeypatch.setenv("VERISPEC_KERNELS", str(tmp_path / f"{fast}.json"))
        timer = faster(fast)
        monkeypatch.setattr(kernels.timing, "time_calls", timer)
        draft = bind_eagle(files, target, weights="measured")
        assert draft.weights == fast and timer.seen == [kinds] and timer.flushed
        report = kernel_report(draft)["eagle"]
        assert report["weights"] == fast and report["choice"] == "measured" and not report["cached"]
        again = faster(other)
        monkeypatch.setattr(kernels.timing, "time_calls", again)
        draft = bind_eagle(files, target, weights="measured")
        assert draft.weights == fast and again.seen == [] and kernel_report(draft)["eagle"]["cached"]
        assert bind_eagle(files, target, weights=other).weights == other  # asked: never timed
        assert again.seen == []
    wide = tiny_llama(vocab_size=64, seed=0, dtype=torch.float64)
    assert bind_eagle(tiny_eagle(wide, seed=2), wide, weights="measured").weights == "fp32" and again.seen == []


def test_save_load_round_trip(tiny_target, tmp_path: Path) -> None:
    files, _ = _draft_model(tiny_target)
    vmap = torch.tensor([2, 5, 9, 11, 40])
    save_eagle_head(files.head, tmp_path, vocab_map=vmap, meta={"note": "x"}, dtype=torch.float32)
    loaded = load_eagle_head(tmp_path, dtype=torch.float64)
    assert torch.equal(loaded.vocab_map, vmap) and loaded.meta["note"] == "x"
    for (k, a), (_, b) in zip(files.head.state_dict().items(), loaded.head.state_dict().items()):
        torch.testing.assert_close(a, b, msg=k)
    dm = bind_eagle(loaded, tiny_target)
    assert dm.out_rows.shape == (5, tiny_target.model.config.hidden_size)


def test_load_errors(tiny_target, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="eagle_config.json"):
        load_eagle_head(tmp_path)
    files, _ = _draft_model(tiny_target)
    save_eagle_head(files.head, tmp_path, vocab_map=None)
    cfg = json.loads((tmp_path / "eagle_config.json").read_text())
    (tmp_path / "eagle_config.json").write_text(json.dumps({**cfg, "format": "other"}))
    with pytest.raises(ModelLoadError, match="format"):
        load_eagle_head(tmp_path)
    cfg["config"]["intermediate_size"] *= 2
    (tmp_path / "eagle_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="does not match its config"):
        load_eagle_head(tmp_path)


def test_bind_refuses_mismatched_targets(tiny_target) -> None:
    files = tiny_eagle(tiny_target)
    with pytest.raises(ValueError, match="weights must be one of"):
        EagleDrafter(files, weights="int4")
    with pytest.raises(ValueError, match="weights='fp16' needs a float32 CPU target"):
        EagleDrafter(files, weights="fp16").bind(tiny_target)  # a float64 target
    wide = tiny_llama(hidden=48, heads=4, kv_heads=2)
    with pytest.raises(ValueError, match="hidden size"):
        EagleDrafter(files).bind(wide)
    bad = tiny_eagle(tiny_target, vocab_map=torch.tensor([1, 64]))
    with pytest.raises(ValueError, match="vocab_map"):
        EagleDrafter(bad).bind(tiny_target)


def test_targets_whose_logits_are_not_the_head_of_the_features_are_refused() -> None:
    lm = tiny_llama(seed=9)
    assert features_match_logits(lm.model)

    def scale(module, args, output):
        output.logits = output.logits * 2.0  # like a logit scale / soft cap after the head
        return output

    lm.model.register_forward_hook(scale)
    assert not features_match_logits(lm.model)
    with pytest.raises(ValueError, match="lm_head"):
        SpeculativeDecoder(lm, EagleDrafter(tiny_eagle(lm)))


def test_drafter_misuse_is_reported(tiny_target) -> None:
    d = EagleDrafter(tiny_eagle(tiny_target))
    from verispec.drafters import DraftAsk

    with pytest.raises(RuntimeError, match="bind"):
        d.start([[5, 6, 7]])
    d.bind(tiny_target)
    with pytest.raises(ValueError, match="features"):
        d.start([[5, 6, 7]])  # no prompt features
    d.start([[5, 6, 7]], [torch.zeros(2, tiny_target.model.config.hidden_size, dtype=torch.float64)])
    out = d.propose(DraftAsk.of([2], 64, SamplingParams(temperature=0), dtype=torch.float64))
    with pytest.raises(ValueError, match="features"):
        d.update([out.tokens[0].tolist()])
    with pytest.raises(ValueError, match="2 emitted tokens but 1 features"):
        d.update([out.tokens[0].tolist()], features=[torch.zeros(1, tiny_target.model.config.hidden_size)])


def test_one_token_prompts_still_draft(tiny_target) -> None:
    """A prompt of one token has no target feature yet: the head starts from f_{-1} = 0."""
    dec = SpeculativeDecoder(tiny_target, EagleDrafter(tiny_eagle(tiny_target)), k=3)
    res = dec.generate(["x", "ab"], 12, SamplingParams(temperature=0))
    ref = SpeculativeDecoder(tiny_target, None).generate(["x", "ab"], 12, SamplingParams(temperature=0))
    assert res.token_ids == ref.token_ids and res.stats.drafted > 0


# ---------------------------------------------------------------------------------------------- shipped head

EAGLE_DIR = EAGLE_BUILTINS[EAGLE_DRAFT]


def test_shipped_eagle_head_files() -> None:
    assert is_eagle_dir(EAGLE_DIR), f"the built-in EAGLE head is missing from {EAGLE_DIR}"
    size = sum(f.stat().st_size for f in EAGLE_DIR.rglob("*") if f.is_file())
    assert size <= 20_000_000
    files = load_eagle_head(EAGLE_DIR)
    vmap = files.vocab_map
    assert vmap is not None and vmap.dtype == torch.int64 and vmap.ndim == 1
    assert torch.equal(vmap, torch.unique(vmap))  # sorted ascending, no repeats
    assert int(vmap.min()) >= 0 and int(vmap.max()) < 49152
    assert 2 in set(vmap.tolist())  # SmolLM2's <|im_end|> (EOS) can be drafted
    assert files.head.config.hidden_size == 576 and files.meta["target"] == "smollm2-135m"
    assert (EAGLE_DIR / "MODEL_CARD.md").is_file()


@pytest.mark.slow
def test_shipped_eagle_head_is_exact_and_trained_with_the_real_target() -> None:
    from verispec.models import load_causal_lm

    target = load_causal_lm("smollm2-135m")
    prompts = ["def is_prime(n):\n    ", "import os\n\ndef list_python_files(root):\n    "]
    greedy = SamplingParams(temperature=0.0)
    ref = SpeculativeDecoder(target, None).generate(prompts, 32, greedy)
    out = SpeculativeDecoder(target, load_drafter("eagle"), k=4).generate(prompts, 32, greedy)
    assert out.token_ids == ref.token_ids
    # A trained head, not an untrained one: on these prompts the shipped head measured alpha
    # 0.18 (accepted / drafted, k=4); the untrained pass-through initialisation 0.004.
    assert out.stats.alpha > 0.08, out.stats.alpha


def test_drafter_specs_resolve_eagle_heads(tiny_target, tmp_path: Path) -> None:
    from verispec.drafters import HybridDrafter, PromptLookupDrafter, make_drafter

    files = tiny_eagle(tiny_target)
    save_eagle_head(files.head, tmp_path / "head", vocab_map=None)
    d = make_drafter(str(tmp_path / "head"))
    assert isinstance(d, EagleDrafter) and d.name == "head"
    h = make_drafter(str(tmp_path / "head") + "+ngram")
    assert isinstance(h, HybridDrafter) and isinstance(h.model, EagleDrafter) and h.reads_target_features
    assert isinstance(make_drafter("eagle"), EagleDrafter)
    # "default": the fastest measured for the built-in target (BENCHMARKS.md), prompt lookup elsewhere
    best = make_drafter("default", target="smollm2-135m")
    assert isinstance(best, HybridDrafter) and isinstance(best.model, EagleDrafter)
    assert isinstance(make_drafter("default", target=str(tmp_path / "some-hf-dir")), PromptLookupDrafter)
    assert isinstance(make_drafter("default"), PromptLookupDrafter)
    e = make_drafter("eagle+ngram")
    assert isinstance(e, HybridDrafter) and isinstance(e.model, EagleDrafter) and e.name == "smollm2-135m-eagle+ngram"
    assert e.model.weights == "auto"
    f32 = make_drafter("eagle:fp32+ngram")  # what the head's draft steps read
    assert f32.model.weights == "fp32" and f32.name == "smollm2-135m-eagle:fp32+ngram"
    d16 = make_drafter(str(tmp_path / "head") + ":fp16")
    assert isinstance(d16, EagleDrafter) and d16.weights == "fp16" and d16.name == "head:fp16"
    with pytest.raises(ModelLoadError, match="weights must be one of auto, fp16, int8, fp32, measured, got 'int3'"):
        make_drafter(str(tmp_path / "head") + ":int3")
    with pytest.raises(ModelLoadError, match="weights must be one of"):
        make_drafter("eagle:fp64+ngram")
    with pytest.raises(ModelLoadError, match="does not exist"):
        make_drafter(str(tmp_path / "nothing-here"))


def _loss_over_all_positions(outs, f, w, W, reg_weight, top1_weight=0.0):
    """The loss as first written: every position through the output rows, weighted; the
    top-1 term position by position."""
    lp_t = torch.log_softmax(f @ W.T, -1)
    loss = f.new_zeros(())
    for s, f_hat in enumerate(outs, 1):
        ws = w.clone()
        ws[:, :s] = 0
        lp_s = torch.log_softmax(f_hat @ W.T, -1)
        kl = ((lp_t.exp() * (lp_t - lp_s)).sum(-1) * ws).sum() / ws.sum().clamp_min(1)
        reg = (torch.nn.functional.smooth_l1_loss(f_hat, f, reduction="none").mean(-1) * ws).sum() / ws.sum().clamp_min(1)
        ce = sum(-lp_s[b, t, int(lp_t[b, t].argmax())] * ws[b, t] for b in range(w.shape[0]) for t in range(w.shape[1]))
        loss = loss + kl + reg_weight * reg + top1_weight * ce / ws.sum().clamp_min(1)
    return loss


@pytest.mark.parametrize("top1_weight", [0.0, 1.5])
def test_the_loss_over_scored_positions_and_a_cropped_batch_is_the_loss_over_all(tiny_target, top1_weight) -> None:
    """unrolled_loss gathers the positions of weight > 0 and the trainer crops the batch after
    its last one: the same loss as scoring every position of the full batch, the cross-entropy
    at the target's argmax (``top1_weight``) included."""
    from verispec.distill.eagle_train import FeatureSet, _last_scored, _position_weight, unrolled_loss

    files, dm = _draft_model(tiny_target)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(4, 64, (3, 14), generator=g)
    with torch.no_grad():
        f = target_features(tiny_target.model, ids)
    weight = torch.ones(3, 14, dtype=torch.uint8)
    weight[:, 10:] = 0  # padding
    generated = torch.zeros_like(weight)
    generated[:, 4:] = 1  # prompt of 4 tokens
    b = FeatureSet(ids, f, weight, generated)
    W = tiny_target.model.get_output_embeddings().weight.detach()[::2]  # a vocab map of every other id
    for answers_only in (False, True):
        w = _position_weight(b, answers_only)
        end = _last_scored(w, None)
        assert end == 10
        full = _loss_over_all_positions(unrolled_predictions(files.head, dm.embed, f, ids, 3), f, w, W, 0.1,
                                        top1_weight)
        outs = unrolled_predictions(files.head, dm.embed, f[:, :end], ids[:, :end], 3)
        fast, _ = unrolled_loss(outs, f[:, :end], w[:, :end], W, 0.1, top1_weight)
        torch.testing.assert_close(fast, full, atol=1e-10, rtol=1e-10)
    assert not torch.allclose(_loss_over_all_positions(unrolled_predictions(files.head, dm.embed, f, ids, 3), f,
                                                       _position_weight(b, False), W, 0.1, top1_weight), fast)
    # (and the top-1 term counts: the loss without it differs)
    assert not torch.allclose(unrolled_loss(outs, f[:, :end], w[:, :end], W, 0.1, 0.0)[0],
                              unrolled_loss(outs, f[:, :end], w[:, :end], W, 0.1, 1.5)[0])


@pytest.mark.parametrize("start", [0, 2, 6])
def test_later_steps_from_a_start_position_are_exact_after_it(tiny_target, start) -> None:
    """Steps >= 2 run only from ``start`` (a prompt before it is context): positions from
    start + depth on get exactly the full computation's features; earlier ones may not."""
    _, dm = _draft_model(tiny_target)
    ids = torch.randint(4, 64, (2, 12), generator=torch.Generator().manual_seed(start))
    with torch.no_grad():
        f = target_features(tiny_target.model, ids)
        full = unrolled_predictions(dm.head, dm.embed, f, ids, depth=3)
        part = unrolled_predictions(dm.head, dm.embed, f, ids, depth=3, start=start)
    for s in range(3):
        torch.testing.assert_close(part[s][:, start + 3 :], full[s][:, start + 3 :], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(part[0], full[0], atol=1e-10, rtol=1e-10)  # step 1 always runs everywhere
    if start:
        assert not torch.allclose(part[1][:, :start], full[1][:, :start])  # (the comparison can fail)


def test_int8_draft_weights_approximate_the_linear_and_refuse_widths_the_kernel_misreads() -> None:
    """``int8_linear``: x @ W.T + b to int8 rounding, through the compiled panel8 kernel (any
    width) or torch's kernel (widths that are multiples of 32; None, never a crash or garbage,
    for others); None for bias dtypes or weights that are not float32."""
    from verispec.models import int8_linear
    from verispec.models.kernels.compact import _torch_int8_linear
    from verispec.models.panel8 import load_panel8, quantize_rows

    if int8_linear(torch.zeros(8, 32)) is None:
        pytest.skip("this torch build has no int8 weight kernel and the compiled one cannot be built")
    gen = torch.Generator().manual_seed(0)
    shapes = ((7, 32), (64, 96), (200, 576)) + (((9, 24), (70, 7)) if load_panel8() is not None else ())
    for out_f, in_f in shapes:
        w, b = torch.randn(out_f, in_f, generator=gen), torch.randn(out_f, generator=gen)
        x = torch.randn(5, in_f, generator=gen)
        want = torch.nn.functional.linear(x, w, b)
        got = int8_linear(w, b)(x)
        assert got.dtype == torch.float32 and got.shape == want.shape
        err = (got - want).abs().max() / want.abs().max()
        assert err < 0.02, err
        wrong = torch.nn.functional.linear(x, w.flip(0), b)  # the check can fail: another weight is far off
        assert (got - wrong).abs().max() / want.abs().max() > 0.1
    for bad in (torch.zeros(8, 32, dtype=torch.float64),):
        assert int8_linear(bad) is None
    assert int8_linear(torch.zeros(8, 32), torch.zeros(8, dtype=torch.float64)) is None
    if hasattr(torch, "_weight_int8pack_mm"):  # torch's kernel, the fallback: only widths it reads right
        for bad in (torch.zeros(8, 24), torch.zeros(8, 7)):
            assert _torch_int8_linear(*quantize_rows(bad), None) is None
        w = torch.randn(64, 96, generator=gen)
        x = torch.randn(3, 96, generator=gen)
        got = _torch_int8_linear(*quantize_rows(w), None)(x)
        assert (got - x @ w.T).abs().max() / (x @ w.T).abs().max() < 0.02
