"""verispec: exact, deterministic speculative decoding for PyTorch / HuggingFace models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .rng import sample, uniform
from .sampling import SamplingParams, logits_to_probs
from .verify import Verification, gumbel_argmax, verify

if TYPE_CHECKING:
    from .engine import GenerationResult, GenerationStats, SpeculativeDecoder
    from .models import CausalLM, ModelLoadError, load_causal_lm

__version__ = "0.1.0"

# The model-facing names import transformers (seconds); load them on first use so that the
# verifier alone stays a light import.
_LAZY = {
    "SpeculativeDecoder": "engine",
    "GenerationResult": "engine",
    "GenerationStats": "engine",
    "CausalLM": "models",
    "ModelLoadError": "models",
    "load_causal_lm": "models",
}

__all__ = [
    "CausalLM",
    "GenerationResult",
    "GenerationStats",
    "ModelLoadError",
    "SamplingParams",
    "SpeculativeDecoder",
    "Verification",
    "gumbel_argmax",
    "load_causal_lm",
    "logits_to_probs",
    "sample",
    "uniform",
    "verify",
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'verispec' has no attribute {name!r}")
