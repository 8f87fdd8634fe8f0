"""The same generation through HuggingFace ``model.generate`` (assisted generation / prompt lookup).

HF assisted generation is batch-1 only. It reads its draft length from the *assistant's*
``generation_config`` (``num_assistant_tokens``, ``num_assistant_tokens_schedule``,
``assistant_confidence_threshold``), so :func:`hf_generate` sets those for the call and restores
them afterwards. The K mapping used here (and printed in the report):

* fixed K, model drafter: ``num_assistant_tokens=K``, schedule ``"constant"``, no confidence
  threshold (early stopping off): exactly K drafts per iteration, like verispec;
* ``heuristic`` / ``auto``, model drafter: HF's own adaptive schedule ``"heuristic_transient"``
  (+2 after a full accept, -1 otherwise; reset per call) from K=4, no confidence threshold;
* prompt lookup: ``prompt_lookup_num_tokens=K``, ``max_matching_ngram_size`` = verispec's
  ``max_ngram`` (HF has no K schedule for it; adaptive configs are compared with HF's best fixed K).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import transformers

from ..models import CausalLM
from ..sampling import SamplingParams

__all__ = ["HFSetting", "hf_generate", "hf_supports"]


@dataclass(frozen=True)
class HFSetting:
    """One HF configuration: ``kind`` is "model" or "ngram"; ``k`` an int or "heuristic"."""

    kind: str
    k: int | str
    max_ngram: int = 3

    def describe(self) -> str:
        if self.kind == "ngram":
            return f"prompt_lookup_num_tokens={self.k}, max_matching_ngram_size={self.max_ngram}"
        if self.k == "heuristic":
            return "num_assistant_tokens=4, schedule=heuristic_transient, assistant_confidence_threshold=0"
        return f"num_assistant_tokens={self.k}, schedule=constant, assistant_confidence_threshold=0"


def hf_supports(draft: CausalLM | None) -> str | None:
    """``None`` if HF can use this draft model as ``assistant_model``, else the reason it cannot."""
    if draft is None:
        return None
    if draft.vocab_map is not None:
        return "the draft has a reduced output vocabulary (vocab_map); HF assisted generation needs full-vocab logits"
    return None


@torch.inference_mode()
def hf_generate(target: CausalLM, ids: list[int], max_new_tokens: int, sampling: SamplingParams,
                setting: HFSetting, draft: CausalLM | None = None) -> tuple[list[int], float, int]:
    """Generate from prompt ids with HF; returns (new token ids, wall seconds, target passes).

    Target passes are the calls of the target's forward (the prefill, which emits the first
    token, included), counted by a hook for the call: tokens / passes is HF's tau, comparable
    with verispec's (whose prefill also emits the first token and counts as a pass), so a gap
    between the two engines splits into tokens per pass and time per pass."""
    model = target.model
    input_ids = torch.tensor([ids], dtype=torch.int64, device=model.device)
    kw: dict = dict(
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=max_new_tokens,
        pad_token_id=_pad_id(target),
    )
    if sampling.greedy:
        kw.update(do_sample=False, temperature=None, top_k=None, top_p=None, min_p=None)
    else:
        kw.update(do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k or None,
                  top_p=sampling.top_p if sampling.top_p < 1.0 else None,
                  min_p=sampling.min_p if sampling.min_p > 0 else None)
    restore = {}
    if setting.kind == "ngram":
        kw.update(prompt_lookup_num_tokens=int(setting.k), max_matching_ngram_size=setting.max_ngram)
    elif setting.kind == "model":
        if draft is None:
            raise ValueError("HF assisted generation with a model drafter needs the draft model")
        gc = draft.model.generation_config
        new = dict(num_assistant_tokens=4 if setting.k == "heuristic" else int(setting.k),
                   num_assistant_tokens_schedule="heuristic_transient" if setting.k == "heuristic" else "constant",
                   assistant_confidence_threshold=0.0)
        restore = {key: getattr(gc, key, None) for key in new}
        for key, value in new.items():
            setattr(gc, key, value)
        kw["assistant_model"] = draft.model
    elif setting.kind != "none":
        raise ValueError(f"unknown HF setting kind {setting.kind!r}")
    if not sampling.greedy and sampling.seed is not None:
        torch.manual_seed(sampling.seed)
    verbosity = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()  # HF warns about its own defaults on every call
    passes = [0]
    hook = model.register_forward_pre_hook(lambda *_: passes.__setitem__(0, passes[0] + 1))
    try:
        t0 = time.perf_counter()
        out = model.generate(input_ids, **kw)
        wall = time.perf_counter() - t0
    finally:
        hook.remove()
        transformers.utils.logging.set_verbosity(verbosity)
        if restore:
            gc = draft.model.generation_config  # type: ignore[union-attr]
            for key, value in restore.items():
                setattr(gc, key, value)
    return out[0, len(ids):].tolist(), wall, passes[0]


def _pad_id(lm: CausalLM) -> int | None:
    tok = lm.tokenizer
    if tok.pad_token_id is not None:
        return tok.pad_token_id
    eos = lm.model.generation_config.eos_token_id
    return eos[0] if isinstance(eos, (list, tuple)) else eos
