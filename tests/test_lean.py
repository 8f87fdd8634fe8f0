"""Lean Llama decoder layers (verispec.models.lean): the same outputs as HF's forward, bit for bit."""

from __future__ import annotations

import pytest
import torch

from verispec.models import lean_layers
from verispec.models import lean as lean_mod
from verispec.kv import KVRunner
from verispec.testing import tiny_llama


def _passes(model, seed: int = 0) -> list[torch.Tensor]:
    """Logits of a prefill, a one-token step, a 4-token chain and a tree pass, on two rows of
    different lengths (so the later passes carry a mask with holes)."""
    g = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    r = KVRunner(model, 2)
    out = [r.forward(torch.randint(3, V, (2, 7), generator=g),
                     live=torch.tensor([[True] * 7, [False] * 2 + [True] * 5]))]
    out.append(r.forward(torch.randint(3, V, (2, 1), generator=g)))
    out.append(r.forward(torch.randint(3, V, (2, 4), generator=g)))
    r.commit(torch.tensor([[True, True, False, False], [True, False, False, False]]))
    parents = torch.tensor([[-1, 0, 0, 1], [-1, 0, 1, 2]])
    out.append(r.forward(torch.randint(3, V, (2, 4), generator=g), parents=parents))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lean_layers_give_hf_outputs_bit_for_bit(dtype):
    ref = tiny_llama(seed=4, dtype=dtype, layers=2).model
    lean = tiny_llama(seed=4, dtype=dtype, layers=2).model
    assert lean_layers(lean) == 2 and lean_layers(lean) == 0  # installed once
    assert all(l.forward.__func__ is lean_mod._lean_forward for l in lean.model.layers)
    for a, b in zip(_passes(ref), _passes(lean)):
        assert torch.equal(a, b)


def test_lean_layers_run_hf_forward_when_training_or_asked_for_more(monkeypatch):
    """Training, an unknown keyword, or another attention implementation since install: HF's
    forward runs (here detected by making the lean path fail)."""
    lm = tiny_llama(seed=4, dtype=torch.float32, layers=1)
    model = lm.model
    lean_layers(model)
    ids = torch.tensor([[5, 6, 7]])
    want = model(ids).logits
    monkeypatch.setattr(lean_mod, "_rotate_half", lambda x: pytest.fail("lean path ran"))
    model.train()
    assert torch.allclose(model(ids).logits, want)
    model.eval()
    layer = model.model.layers[0]
    assert layer(model.model.embed_tokens(ids), output_attentions=True,
                 position_embeddings=model.model.rotary_emb(ids, torch.arange(3)[None])).shape == (1, 3, 32)
    model.set_attn_implementation("eager")
    assert torch.allclose(model(ids).logits, want, atol=1e-5)


def test_lean_layers_leave_other_layers_alone():
    """Only exact LlamaDecoderLayer instances qualify: a subclass keeps its own forward."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    class Custom(LlamaDecoderLayer):
        pass

    model = tiny_llama(seed=4, dtype=torch.float32, layers=2).model
    layer = model.model.layers[1]
    layer.__class__ = Custom
    assert lean_layers(model) == 1 and getattr(layer, "_verispec_lean", None) is None


def test_lean_layers_keep_the_lean_path_when_hidden_states_are_asked_for(monkeypatch):
    """A pass that also returns hidden states and taps (what the engine runs for an EAGLE head)
    runs the lean forward, not HF's (its cost: BENCHMARKS.md, "The engine's feature passes made
    lean"), and returns HF's hidden states and logits bit for bit."""
    ref = tiny_llama(seed=4, dtype=torch.float32, layers=3).model
    lean = tiny_llama(seed=4, dtype=torch.float32, layers=3).model
    lean_layers(lean)
    for layer in lean.model.layers:  # HF's forward, the fallback, would fail this test
        _, impl, attention = layer._verispec_lean
        monkeypatch.setattr(layer, "_verispec_lean", (lambda *a, **k: pytest.fail("HF forward ran"), impl, attention))
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    runs = []
    for model in (ref, lean):
        r = KVRunner(model, 2)
        first = r.forward(ids, return_hidden=True, hidden_taps=(1, 2))
        runs.append([*first, *r.forward(ids[:, :2], return_hidden=True, hidden_taps=(1, 2)),
                     *r.forward(ids[:, :1], return_hidden=True)])
    assert runs[1][1].shape == (2, 4, 3, 32)  # final, then the taps after layers 1 and 2
    for a, b in zip(*runs):
        assert torch.equal(a, b)
