"""EAGLE heads that read the target's lower layers (``TapFusion``, as EAGLE-3 reads low and middle
layers): the taps are the residual stream after the named decoder layers, a head given taps
starts as the head it was trained from, and the taps travel through features, shards and training."""

from __future__ import annotations

import pytest
import torch

from verispec.distill.eagle_train import FeatureSet, train_eagle, unrolled_predictions
from verispec.drafters.eagle_head import EagleHead, eagle_config, target_features, target_taps
from verispec.testing import tiny_eagle, tiny_llama


def _ids(seed: int, shape=(2, 10)) -> torch.Tensor:
    return torch.randint(4, 64, shape, generator=torch.Generator().manual_seed(seed))


def test_taps_are_the_residual_stream_after_the_named_layers() -> None:
    """Read with forward hooks on the decoder layers themselves, not through HF's hidden-state
    numbering (an off-by-one there would tap the wrong layer)."""
    model = tiny_llama(vocab_size=64, seed=0, layers=3, dtype=torch.float64).model
    seen = {}
    hooks = [layer.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out[0] if isinstance(out, tuple)
                                                                                 else out))
             for i, layer in enumerate(model.base_model.layers)]
    ids = _ids(0)
    try:
        with torch.no_grad():
            f, taps = target_taps(model, ids, (2, 1))
    finally:
        for h in hooks:
            h.remove()
    assert taps.shape == (2, 10, 2, model.config.hidden_size)
    torch.testing.assert_close(taps[:, :, 0], seen[1], atol=0, rtol=0)  # after decoder layer 2 (1-based)
    torch.testing.assert_close(taps[:, :, 1], seen[0], atol=0, rtol=0)
    assert not torch.allclose(taps[:, :, 0], taps[:, :, 1])
    torch.testing.assert_close(f, target_features(model, ids), atol=0, rtol=0)


def test_a_head_given_taps_starts_as_the_head_it_came_from(tiny_target) -> None:
    """The fusion starts at zero: the unrolled drafts of a head with taps, loaded from one
    without, equal the original's whatever the taps hold; once the fusion is not zero they move."""
    plain = tiny_eagle(tiny_target, seed=1).head
    tapped = EagleHead(eagle_config(tiny_target.model.config, (1,))).to(plain.fc.weight.dtype)
    missing, unexpected = tapped.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == ["taps.gain", "taps.proj.weight"] and not unexpected
    embed = tiny_target.model.get_input_embeddings()
    ids = _ids(1)
    with torch.no_grad():
        f, taps = target_taps(tiny_target.model, ids, (1,))
        want = unrolled_predictions(plain, embed, f, ids, depth=3)
        got = unrolled_predictions(tapped, embed, f, ids, depth=3, taps=taps)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
        tapped.taps.proj.weight.normal_(std=0.1)
        moved = unrolled_predictions(tapped, embed, f, ids, depth=3, taps=taps)
    assert not torch.allclose(moved[0], want[0])
    with pytest.raises(ValueError, match=r"reads the target's layers \[1\]"):
        unrolled_predictions(tapped, embed, f, ids, depth=1)


def test_tap_layers_outside_the_target_are_refused(tiny_target) -> None:
    for taps in ((0,), (2,), (1, 1)):  # the last layer (2) is the features themselves
        with pytest.raises(ValueError, match=r"taps must be distinct decoder layers in 1\.\.1 "):
            eagle_config(tiny_target.model.config, taps)


def test_rebuilt_shards_hold_each_sequences_taps(tiny_target, tmp_path) -> None:
    """``archive_features(taps=...)`` stores, per sequence and unpadded, the taps of a pass over
    that sequence alone; FeatureSet.load reads them back with their layers."""
    from verispec.distill.answers import answer_shards
    from verispec.distill.archive import AnswerArchive
    from verispec.distill.refeature import archive_features

    g = torch.Generator().manual_seed(2)
    seqs = [torch.randint(4, 64, (n,), generator=g).tolist() for n in (9, 4, 13, 6, 11)]
    archive = AnswerArchive(seqs, [2] * len(seqs), [f"s{i}" for i in range(len(seqs))], ["qa"] * len(seqs),
                            "torch.float64")
    archive_features(tiny_target, archive, tmp_path / "re", shard_size=2, batch_tokens=20, taps=(1,))
    data = FeatureSet.load(answer_shards(tmp_path / "re"))
    assert data.tap_layers == (1,) and data.taps.shape[:3] == (len(seqs), 13, 1)
    for b, s in enumerate(seqs):
        with torch.no_grad():
            _, want = target_taps(tiny_target.model, torch.tensor([s[:-1]]), (1,))
        torch.testing.assert_close(data.taps[b, : len(s) - 1].float(), want[0].half().float(), atol=1e-3, rtol=1e-3)
        assert not data.taps[b, len(s) - 1:].any()
    assert FeatureSet.load(answer_shards(tmp_path / "re"), taps=False).taps is None


def test_training_with_taps_moves_the_fusion_and_needs_the_taps(tmp_path) -> None:
    """A head trained from an untapped init with taps learns a non-zero fusion; a head whose
    layers the features lack is refused with the command that writes them."""
    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    init = tiny_eagle(target, seed=3).head
    model = target.model
    ids = _ids(4, (6, 12))
    with torch.no_grad():
        f, taps = target_taps(model, ids, (1,))
    weight = torch.ones(6, 12, dtype=torch.uint8)
    gen = torch.zeros_like(weight)
    gen[:, 3:] = 1
    data = FeatureSet(ids.int(), f.float(), weight, gen, taps.float(), (1,))
    vmap = torch.arange(64)
    head, _ = train_eagle(model, data, data, vmap, tmp_path / "h", steps=3, batch_size=2, lr=1e-2,
                          init_from=init, taps=(1,), eval_every=100, ckpt_every=100, log=lambda *_: None)
    assert head.feature_taps == (1,) and head.taps.proj.weight.abs().sum() > 0
    with pytest.raises(ValueError, match="distill features --taps"):
        train_eagle(model, FeatureSet(ids.int(), f.float(), weight, gen), data, vmap, tmp_path / "h2", steps=1,
                    init_from=init, taps=(1,), log=lambda *_: None)


def _tapped_setup(seed: int = 4, taps=(1, 2)):
    target = tiny_llama(vocab_size=64, seed=0, layers=3, dtype=torch.float64)
    return target, tiny_eagle(target, seed=seed, taps=taps)


def test_the_drafter_drafts_what_training_unrolls_from_the_engines_taps() -> None:
    """The engine hands a tapped head ``[n, 1 + taps, H]`` (prefill with ``hidden_taps``); the q of
    each step of its chain is the unrolled training pass's over the same taps and tokens. A drafter
    that dropped or misplaced the taps drafts otherwise (checked: the untapped head's q differs)."""
    from verispec.drafters import DraftAsk, EagleDrafter
    from verispec.kv import prefill
    from verispec.sampling import SamplingParams

    target, files = _tapped_setup()
    W = target.model.get_output_embeddings().weight.detach()
    embed = target.model.get_input_embeddings()
    d = EagleDrafter(files, weights="fp32")
    d.bind(target)
    prompt = _ids(5, (1, 9))[0].tolist()
    n = len(prompt)
    with torch.no_grad():
        pre = prefill(target.model, [prompt], return_hidden=True, hidden_taps=(1, 2))
    assert pre.hidden[0].shape == (n, 3, target.model.config.hidden_size)
    d.start([prompt], [pre.hidden[0][:-1]])
    draft = d.propose(DraftAsk.of([3], 64, SamplingParams(temperature=1.0), dtype=torch.float64))
    toks = draft.tokens[0].tolist()
    ids = torch.tensor([prompt + toks])
    with torch.no_grad():
        f, taps = target_taps(target.model, ids, (1, 2))
        outs = unrolled_predictions(files.head, embed, f, ids, depth=3, taps=taps)
        plain = files.head.taps.proj.weight.clone()
        files.head.taps.proj.weight.zero_()
        untapped = unrolled_predictions(files.head, embed, f, ids, depth=3, taps=taps)
        files.head.taps.proj.weight.copy_(plain)
    q = torch.stack([torch.softmax(outs[s][0, n - 1 + s] @ W.T, -1) for s in range(3)])  # [3, V]: step s's q
    torch.testing.assert_close(draft.probs[0], q, atol=1e-9, rtol=1e-9)
    q0 = torch.stack([torch.softmax(untapped[s][0, n - 1 + s] @ W.T, -1) for s in range(3)])
    assert not torch.allclose(draft.probs[0], q0, atol=1e-6)


def test_greedy_output_with_a_tapped_head_equals_target_only() -> None:
    """Through the engine (prefill, target passes with taps, rollback), alone and behind prompt
    lookup: the text is the target's, and the head's drafts are accepted."""
    from verispec.drafters import EagleDrafter, HybridDrafter
    from verispec.engine import SpeculativeDecoder
    from verispec.sampling import SamplingParams

    target, files = _tapped_setup(seed=3, taps=(2,))
    prompts = ["hello world hello wor", "abc abc abc abc", "x"]
    greedy = SamplingParams(temperature=0)
    ref = SpeculativeDecoder(target, None).generate(prompts, 20, greedy).token_ids
    for drafter in (EagleDrafter(files), HybridDrafter(EagleDrafter(files))):
        assert drafter.feature_taps == (2,)
        res = SpeculativeDecoder(target, drafter, k=3).generate(prompts, 20, greedy)
        assert res.token_ids == ref and res.stats.accepted > 0


def test_a_tapped_head_refuses_what_it_cannot_read(tiny_target) -> None:
    from verispec.drafters import EagleDrafter

    _, files = _tapped_setup(taps=(2,))
    with pytest.raises(ValueError, match=r"reads layers \[2\]; target .* has 2"):
        EagleDrafter(files).bind(tiny_target)  # a 2-layer target: layer 2 is its last
    target, files = _tapped_setup(taps=(2,))
    d = EagleDrafter(files)
    d.bind(target)
    with pytest.raises(ValueError, match=r"needs features \[n, 2, H\], got \[4, 32\]"):
        d.start([[5, 6, 7, 8, 9]], [torch.zeros(4, 32, dtype=torch.float64)])


def test_a_tapped_head_round_trips_through_its_files(tmp_path) -> None:
    from verispec.drafters.eagle_head import load_eagle_head, save_eagle_head

    _, files = _tapped_setup(taps=(1, 2))
    save_eagle_head(files.head, tmp_path / "h", vocab_map=None, dtype=torch.float32)
    back = load_eagle_head(tmp_path / "h", dtype=torch.float64)
    assert back.head.feature_taps == (1, 2)
    for k, v in files.head.state_dict().items():
        if not k.startswith("body.embed_tokens"):
            torch.testing.assert_close(back.head.state_dict()[k], v.float().double(), atol=0, rtol=0)
    assert back.head.taps.proj.weight.abs().sum() > 0


def test_a_head_widened_to_more_layers_starts_as_it_was(tmp_path) -> None:
    """``widen_taps``: a head reading layer 1, laid out to read layers (2, 1), unrolls exactly the
    old predictions whatever layer 2 holds; its blocks sit at layer 1's new place (moving them to
    the wrong block, or leaving the new gain at zero, changes what it reads). Training from it
    with the wider taps works; a head's layers missing from the new taps are refused."""
    from verispec.drafters.eagle_head import widen_taps

    target, files = _tapped_setup(seed=4, taps=(1,))
    old = files.head
    with torch.no_grad():
        old.taps.proj.weight.normal_(std=0.1)
        old.taps.gain.uniform_(0.5, 1.5)
    wide = EagleHead(eagle_config(target.model.config, (2, 1))).to(old.fc.weight.dtype)
    wide.load_state_dict(widen_taps(old.state_dict(), (1,), (2, 1)), strict=False)
    assert torch.equal(wide.taps.gain[0], torch.ones_like(wide.taps.gain[0]))
    embed = target.model.get_input_embeddings()
    ids = _ids(6)
    with torch.no_grad():
        f, taps = target_taps(target.model, ids, (2, 1))
        want = unrolled_predictions(old, embed, f, ids, depth=3, taps=taps[:, :, 1:])
        got = unrolled_predictions(wide, embed, f, ids, depth=3, taps=taps)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
    weight = torch.ones(2, 10, dtype=torch.uint8)
    data = FeatureSet(ids.int(), f, weight, weight, taps, (2, 1))
    head, _ = train_eagle(target.model, data, data, torch.arange(64), tmp_path, steps=0, init_from=old, taps=(2, 1),
                          log=lambda *_: None)
    torch.testing.assert_close(head.taps.proj.weight.double(), wide.taps.proj.weight.float().double(), atol=0, rtol=0)
    # features holding more layers than a head reads give it its own, in its order
    torch.testing.assert_close(data.head_taps(old, 10), taps[:, :, 1:].float(), atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"reads the target's layers \[1\]; these features hold \[2\]"):
        FeatureSet(ids.int(), f, weight, weight, taps[:, :, :1], (2,)).head_taps(old, 10)
    with pytest.raises(ValueError, match=r"init_from reads layers \[1\], which must all be among them"):
        train_eagle(target.model, data, data, torch.arange(64), tmp_path, steps=0, init_from=old, taps=(2,),
                    log=lambda *_: None)


@pytest.mark.parametrize("weights", ["fp32", "fp16", "int8"])
def test_the_drafter_fuses_the_taps_through_its_draft_weights(weights) -> None:
    """The fusion of every pass's real features reads its projection from the draft weights (one
    more matmul of the step's kind): close to the head's own :meth:`EagleHead.fuse` (the fusion
    moves the features; a projection left out would not), and what the drafter feeds the head
    comes from that copy (a broken copy moves its features)."""
    from verispec.drafters import EagleDrafter
    from verispec.drafters.eagle_head import bind_eagle
    from verispec.models import fp16_linear, int8_linear

    if weights == "fp16" and fp16_linear(torch.zeros(2, 2)) is None:
        pytest.skip("this torch build has no fbgemm float16 linear")
    if weights == "int8" and int8_linear(torch.zeros(8, 32)) is None:
        pytest.skip("this torch build has no int8 weight kernel")
    target = tiny_llama(vocab_size=64, seed=0, layers=3, dtype=torch.float32)
    files = tiny_eagle(target, seed=4, taps=(1, 2))
    with torch.no_grad():  # a fusion that moves the features well beyond the tolerances below
        files.head.taps.proj.weight.normal_(std=0.2, generator=torch.Generator().manual_seed(0))
    model = bind_eagle(files, target, weights=weights)
    assert model.weights == weights and "fuse" in model._step.linear
    H = target.model.config.hidden_size
    gen = torch.Generator().manual_seed(1)
    f, taps = torch.randn(5, H, generator=gen), 3 * torch.randn(5, 2, H, generator=gen)
    with torch.no_grad():
        want, got = files.head.fuse(f, taps), model.fuse(f, taps)
    tol = {"fp32": dict(atol=2e-5, rtol=2e-5), "fp16": dict(atol=2e-3, rtol=2e-3),
           "int8": dict(atol=0.05, rtol=0.05)}[weights]
    torch.testing.assert_close(got, want, **tol)
    assert (want - f).abs().max() > 20 * tol["atol"]  # the fusion moves the features this much
    drafter = EagleDrafter(files, weights=weights)
    drafter.bind(target)
    with torch.no_grad():
        real = drafter._real_features([torch.cat([f[:, None], taps], 1)])[0]
        torch.testing.assert_close(real, drafter.model.fuse(f, taps), atol=0, rtol=0)
        drafter.model._step.linear["fuse"] = lambda x: torch.zeros(x.shape[0], H)
        assert not torch.allclose(drafter._real_features([torch.cat([f[:, None], taps], 1)])[0], real)
