"""Requests the engine serves, and what a step reports about them."""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..sampling import SamplingParams
from .kpolicy import KPolicy

__all__ = ["Request", "RequestOutput", "Completion", "int_list", "int64_seeds"]


@dataclass
class Request:
    """One generation request: its prompt and everything that is its own.

    Attributes:
        prompt: a string (tokenised by the target's tokenizer, with its chat template if
            ``chat``) or token ids.
        max_new_tokens: this many tokens unless EOS or a stop string ends it first.
        sampling: the sampling transform; its ``seed`` keys the request's random draws
            (``None``: a fresh seed from torch's global generator).
        stop: strings that end the request; its text is cut before the stop string.
        method: ``"exact"`` or ``"gumbel"``; ``None`` is the decoder's.
        k: the draft-length policy (see :mod:`verispec.engine.kpolicy`); ``None`` is the decoder's.
        stream: report text deltas after each step (:attr:`RequestOutput.text`).
        chat: apply the tokenizer's chat template to a string prompt.
        request_id: any hashable id, unique within a batch; ``None`` gets a fresh int.
    """

    prompt: str | Sequence[int]
    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: Sequence[str] = ()
    method: str | None = None
    k: KPolicy | None = None
    stream: bool = False
    chat: bool = False
    request_id: Hashable | None = None


@dataclass
class Completion:
    """A finished request: generated token ids (prompt excluded), text, and why it stopped
    (``"length"``, ``"eos"`` or ``"stop"``)."""

    request_id: Hashable
    token_ids: list[int]
    text: str
    finish_reason: str


@dataclass
class RequestOutput:
    """What one step did for one request.

    Attributes:
        request_id: the request's id.
        token_ids: the tokens this step emitted for it (after EOS / stop-string cuts).
        text: new text for a streaming request (empty otherwise, or when the new tokens do not
            complete a character, or may be the start of a stop string).
        completion: set when the request finished in this step.
    """

    request_id: Hashable
    token_ids: list[int]
    text: str = ""
    completion: Completion | None = None

    @property
    def finished(self) -> bool:
        return self.completion is not None


def int_list(p: object, name: str, what: str = "token id") -> list[int]:
    """``p`` as a list of Python ints: a list/tuple of ints (numpy ints and 0-d integer tensors
    included) or a 1-D integer tensor/array. Floats (``int()`` would truncate them silently),
    bools and bytes are refused with a ``TypeError`` naming ``name``."""
    if isinstance(p, (bytes, bytearray)):
        raise TypeError(f"{name} is bytes: decode it to str first (or pass {what}s as ints)")
    if isinstance(p, (torch.Tensor, np.ndarray)):
        if not _integer_dtype(p) or p.ndim != 1:
            raise TypeError(f"{name} must be a 1-D integer tensor of {what}s, got {p.ndim}-D {p.dtype}")
        return [int(t) for t in p.tolist()]
    if isinstance(p, str) or not isinstance(p, Sequence):
        raise TypeError(f"{name} must be a list of int {what}s, got {type(p).__name__}")
    out = []
    for j, t in enumerate(p):
        if isinstance(t, (torch.Tensor, np.ndarray)) and t.ndim == 0 and _integer_dtype(t):
            t = t.item()
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, numbers.Integral):
            raise TypeError(f"{name}[{j}] must be an int {what}, got {type(t).__name__} {t!r}")
        out.append(int(t))
    return out


def _integer_dtype(x: torch.Tensor | np.ndarray) -> bool:
    if isinstance(x, torch.Tensor):
        return not (x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool)
    return x.dtype.kind in "iu"


def int64_seeds(seeds: object) -> list[int]:
    """``seeds`` as Python ints that fit int64, the key of the counter-based RNG."""
    values = int_list(seeds, "seeds", "seed")
    for i, v in enumerate(values):
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"seeds[{i}] = {v} does not fit in int64 [-2**63, 2**63)")
    return values
