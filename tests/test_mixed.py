"""A bfloat16 body with a float32 head (bulk data generation): float32 logits from the bfloat16
hidden states, the embedding left alone, and the answer shards saying which precision made them."""

from __future__ import annotations

import torch

from verispec.distill.answers import AnswerJob, answer_shards, generate_answers
from verispec.models import Float32Head, float32_head
from verispec.testing import tiny_llama

IDS = torch.tensor([[3, 9, 4, 17, 30, 2, 11, 5]])


def test_the_head_computes_float32_logits_from_the_bfloat16_hidden_states() -> None:
    lm = tiny_llama(vocab_size=64, hidden=64, seed=3, dtype=torch.bfloat16, initializer_range=1.0)
    model = lm.model
    weight = model.get_output_embeddings().weight.detach().clone()  # bfloat16 [V, H], tied to the embedding
    with torch.inference_mode():
        hidden = model.model(IDS).last_hidden_state  # [1, T, H] bfloat16
        before = model(IDS).logits
    want = torch.nn.functional.linear(hidden.float(), weight.float())  # [1, T, V] float32
    # the test has teeth: bfloat16 logits are rounded far beyond the tolerance used below
    assert before.dtype == torch.bfloat16 and (before.float() - want).abs().max() > 1e-3

    assert float32_head(model)
    with torch.inference_mode():
        after = model(IDS).logits
    assert after.dtype == torch.float32
    torch.testing.assert_close(after, want, atol=1e-5, rtol=1e-5)
    assert isinstance(model.get_output_embeddings(), Float32Head)
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16  # untied: the embedding is not cast
    assert torch.equal(model.get_input_embeddings().weight, weight)
    assert not model.config.tie_word_embeddings
    assert lm.vocab_size == 64


def test_float32_models_and_a_second_call_are_left_alone() -> None:
    lm = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    head = lm.model.get_output_embeddings()
    assert not float32_head(lm.model) and lm.model.get_output_embeddings() is head
    low = tiny_llama(vocab_size=64, seed=0, dtype=torch.bfloat16)
    assert float32_head(low.model)
    swapped = low.model.get_output_embeddings()
    assert not float32_head(low.model) and low.model.get_output_embeddings() is swapped


def test_answer_shards_record_the_precision_that_generated_them(tmp_path) -> None:
    from safetensors import safe_open

    jobs = [AnswerJob(f"j{i}", "chat", "a b c d"[: 3 + 2 * i]) for i in range(3)]
    for dtype in (torch.float32, torch.bfloat16):
        lm = tiny_llama(vocab_size=64, seed=0, dtype=dtype)
        float32_head(lm.model)
        out = tmp_path / str(dtype)
        run = generate_answers(lm, jobs, out, max_new_tokens=4, max_batch=2, shard_size=3, chat=False)
        assert run.answers == 3
        [shard] = answer_shards(out)
        with safe_open(str(shard), "pt") as f:
            assert f.metadata()["dtype"] == str(dtype)
