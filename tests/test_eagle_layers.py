"""EAGLE heads of more than one decoder layer: a head deepened from a trained one starts as its
drafts (the added layers write nothing into the residual stream until trained), the drafting
path runs every layer (test_eagle.py compares it with the HF modules), the files round-trip, and
greedy output stays the target's."""

from __future__ import annotations

import pytest
import torch

from verispec.distill.eagle_train import FeatureSet, train_eagle, unrolled_predictions
from verispec.drafters.eagle_head import EagleHead, deepen, eagle_config, target_features
from verispec.testing import tiny_eagle, tiny_llama


def _ids(seed: int, shape=(2, 10)) -> torch.Tensor:
    return torch.randint(4, 64, shape, generator=torch.Generator().manual_seed(seed))


def _deepened(old: EagleHead, config, layers: int) -> EagleHead:
    deep = EagleHead(eagle_config(config, old.feature_taps, layers)).to(old.fc.weight.dtype)
    deep.load_state_dict(deepen(old.state_dict(), len(old.body.layers), layers), strict=False)
    return deep.eval()


@pytest.mark.parametrize("old,new", [(1, 2), (1, 3), (2, 3)])
def test_a_deepened_head_starts_as_it_was(tiny_target, old, new) -> None:
    """Unrolled over three draft steps, the deepened head's predicted features are the old
    head's to the last bit; once an added layer's output projection is not zero they move."""
    head = tiny_eagle(tiny_target, seed=1, layers=old).head
    deep = _deepened(head, tiny_target.model.config, new)
    assert len(deep.body.layers) == new
    embed = tiny_target.model.get_input_embeddings()
    ids = _ids(2)
    with torch.no_grad():
        f = target_features(tiny_target.model, ids)
        want = unrolled_predictions(head, embed, f, ids, depth=3)
        got = unrolled_predictions(deep, embed, f, ids, depth=3)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
        for name in ("self_attn.o_proj", "mlp.down_proj"):  # either output alone moves them
            moved = _deepened(head, tiny_target.model.config, new)
            moved.get_submodule(f"body.layers.{new - 1}.{name}").weight.normal_(std=0.1)
            assert not torch.allclose(unrolled_predictions(moved, embed, f, ids, depth=1)[0], want[0])


def test_deepen_copies_the_last_layer_and_refuses_fewer_layers(tiny_target) -> None:
    head = tiny_eagle(tiny_target, seed=1, layers=2).head
    state = deepen(head.state_dict(), 2, 3)
    for k in ("self_attn.q_proj.weight", "mlp.up_proj.weight", "input_layernorm.weight"):
        assert torch.equal(state[f"body.layers.2.{k}"], state[f"body.layers.1.{k}"])
    assert not torch.equal(state["body.layers.2.self_attn.q_proj.weight"], state["body.layers.0.self_attn.q_proj.weight"])
    with pytest.raises(ValueError, match="cannot lose layers"):
        deepen(head.state_dict(), 2, 1)
    for bad in (0, 9, 1.5, True):
        with pytest.raises(ValueError, match="layers must be an integer in 1..8"):
            eagle_config(tiny_target.model.config, (), bad)


def test_training_a_deeper_head_from_a_shallow_one(tmp_path) -> None:
    """``train_eagle(layers=2)`` from a one-layer init: no steps leave exactly the deepened
    weights; a few steps move the added layer's outputs away from zero; fewer layers than the
    init's are refused."""
    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    init = tiny_eagle(target, seed=3).head
    ids = _ids(4, (6, 12))
    with torch.no_grad():
        f = target_features(target.model, ids)
    weight = torch.ones(6, 12, dtype=torch.uint8)
    gen = torch.zeros_like(weight)
    gen[:, 3:] = 1
    data = FeatureSet(ids.int(), f.float(), weight, gen)
    vmap = torch.arange(64)
    quiet = dict(eval_every=100, ckpt_every=100, log=lambda *_: None)
    head, _ = train_eagle(target.model, data, data, vmap, tmp_path / "h0", steps=0, init_from=init, layers=2, **quiet)
    want = deepen(init.state_dict(), 1, 2)
    for k, v in head.state_dict().items():
        if not k.startswith("body.embed_tokens"):
            torch.testing.assert_close(v, want[k], atol=0, rtol=0)
    head, _ = train_eagle(target.model, data, data, vmap, tmp_path / "h3", steps=3, batch_size=2, lr=1e-2,
                          init_from=init, layers=2, **quiet)
    assert len(head.body.layers) == 2 and head.body.layers[1].self_attn.o_proj.weight.abs().sum() > 0
    assert len(train_eagle(target.model, data, data, vmap, tmp_path / "h1", steps=0, init_from=head,
                           **quiet)[0].body.layers) == 2  # the default: the init's layers
    with pytest.raises(ValueError, match="layers 1: the head has 2 decoder layers"):
        train_eagle(target.model, data, data, vmap, tmp_path / "hx", steps=0, init_from=head, layers=1, **quiet)


def test_a_deep_head_round_trips_and_keeps_greedy_output_exact(tmp_path) -> None:
    """Saved and loaded, a two-layer head has the same weights and config; through the engine,
    alone and behind prompt lookup, greedy output is the target's and drafts are accepted."""
    from verispec.drafters import EagleDrafter, HybridDrafter
    from verispec.drafters.eagle_head import load_eagle_head, save_eagle_head
    from verispec.engine import SpeculativeDecoder
    from verispec.sampling import SamplingParams

    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float64)
    files = tiny_eagle(target, seed=3, layers=2)
    save_eagle_head(files.head, tmp_path / "h", vocab_map=None, dtype=torch.float32)
    back = load_eagle_head(tmp_path / "h", dtype=torch.float64)
    assert back.head.config.num_hidden_layers == 2
    for k, v in files.head.state_dict().items():
        if not k.startswith("body.embed_tokens"):
            torch.testing.assert_close(back.head.state_dict()[k], v.float().double(), atol=0, rtol=0)
    prompts = ["hello world hello wor", "abc abc abc abc", "x"]
    greedy = SamplingParams(temperature=0)
    ref = SpeculativeDecoder(target, None).generate(prompts, 20, greedy).token_ids
    for drafter in (EagleDrafter(back), HybridDrafter(EagleDrafter(back))):
        res = SpeculativeDecoder(target, drafter, k=3).generate(prompts, 20, greedy)
        assert res.token_ids == ref and res.stats.accepted > 0


def test_distill_head_refuses_a_bad_layer_count(capsys) -> None:
    from verispec.distill.head import main

    assert main(["--train", "nowhere", "--heldout", "nowhere", "--out", "x", "--layers", "0"]) == 2
    err = capsys.readouterr().err
    assert "--layers must be in 1..8" in err and "got 0" in err
