"""verispec: exact, deterministic speculative decoding for PyTorch / HuggingFace models."""

from .rng import sample, uniform
from .sampling import SamplingParams, logits_to_probs
from .verify import Verification, gumbel_argmax, verify

__version__ = "0.1.0"

__all__ = [
    "SamplingParams",
    "Verification",
    "gumbel_argmax",
    "logits_to_probs",
    "sample",
    "uniform",
    "verify",
]
