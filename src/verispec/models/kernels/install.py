"""Which CPU kernels a model gets: by its device and by the kernel choice (:func:`apply_cpu_kernels`).
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import nn

from ..lean import lean_layers
from .attention import gqa_attention
from .fixed import fast_lm_head, fast_small_linears
from .invariant import InvariantKernelsUnavailable, invariant_kernels
from .measured import measured_linears
from .plan import KERNELS

__all__ = ["KERNELS", "KERNEL_CHOICES", "model_device", "apply_cpu_kernels", "kernel_choice"]


KERNEL_CHOICES = ("invariant", "measured", "fixed")  # how kernels are chosen (see kernel_choice)


def model_device(model: nn.Module) -> torch.device:
    """The device a model runs on: HF's ``model.device``, else its first parameter's (CPU if none)."""
    dev = getattr(model, "device", None)
    if isinstance(dev, torch.device):
        return dev
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def apply_cpu_kernels(model: nn.Module, *, head: bool = True, linears: bool = True,
                      attention: bool = True, choice: str | None = None) -> tuple[str, ...]:
    """Install the chosen CPU kernels on ``model`` (in place) if it lies on the CPU.

    ``choice`` (default :func:`kernel_choice`: ``$VERISPEC_KERNEL_CHOICE``, else ``"invariant"``):

    * ``"invariant"``: :func:`invariant_kernels`, then :func:`~verispec.models.lean.lean_layers`:
      a row's logits are the same bits whatever the width of its pass and whatever else is in
      its batch. Asked for explicitly it installs all of them or raises
      :class:`InvariantKernelsUnavailable`; as the default it gives way to ``"measured"`` for a
      model it does not cover (not float32: a bfloat16 data run) or when ``head``, ``linears`` or
      ``attention`` is turned off, and, warning once, where its compiled kernels cannot be built.
    * ``"measured"``: ``head`` (a faster output head, :func:`fast_lm_head`'s ``(W @ x.T).T``) and
      ``linears`` (oneDNN-packed weights, rowdot) only for the row counts where they measured
      faster on this machine (:func:`measured_linears`); ``attention``: :func:`gqa_attention`,
      then ``lean_layers`` (bit-identical to HF's).
    * ``"fixed"``: :func:`fast_lm_head` and :func:`fast_small_linears` as tuned on one AMD EPYC.

    A model on any other device (CUDA, MPS, meta, ...) keeps its plain HF modules. Returns the
    names of the kernels that changed the model (a measured choice that keeps every linear plain
    installs neither ``"fast_lm_head"`` nor ``"fast_small_linears"``).
    """
    if model_device(model).type != "cpu":
        return ()
    explicit = choice is not None or bool(os.environ.get("VERISPEC_KERNEL_CHOICE"))
    choice = kernel_choice(choice)
    done: list[str] = []
    if choice == "invariant":
        floats = {p.dtype for p in model.parameters() if p.dtype.is_floating_point}
        if explicit or (head and linears and attention and floats <= {torch.float32}):
            try:
                done.extend(invariant_kernels(model, attention=attention))
            except InvariantKernelsUnavailable as e:
                if explicit:
                    raise
                _warn_once(f"verispec: batch-invariant kernels unavailable ({e}); using the measured ones")
            else:
                if attention and lean_layers(model):
                    done.append("lean_layers")
                return tuple(done)
        choice = "measured"
    if choice == "fixed":
        if head and fast_lm_head(model):
            done.append("fast_lm_head")
        if linears and fast_small_linears(model):
            done.append("fast_small_linears")
        if done:
            model._verispec_kernels = {"choice": "fixed"}
    elif head or linears:
        done.extend(measured_linears(model, head=head, linears=linears))
    if attention and gqa_attention(model):
        done.append("gqa_attention")
    if attention and lean_layers(model):
        done.append("lean_layers")
    return tuple(done)


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def kernel_choice(choice: str | None = None) -> str:
    """``choice``, else ``$VERISPEC_KERNEL_CHOICE``, else ``"invariant"``; one of :data:`KERNEL_CHOICES`.

    ``"invariant"``: batch-invariant kernels (:func:`invariant_kernels`): a row's logits do not
    depend on how many tokens or rows share its pass (compiled kernels; no timing);
    ``"measured"``: linear kernels chosen per row count by timing them on this machine;
    ``"fixed"``: the choices tuned on one AMD EPYC (packed weights for 2-16 rows, the head packed
    for 1-32 rows), kept for A/B comparisons. (The EAGLE head's draft weights follow a rule on
    the CPU's flags under every choice: ``verispec.drafters.eagle_head.capability_draft_weights``.)"""
    choice = choice if choice is not None else (os.environ.get("VERISPEC_KERNEL_CHOICE") or "invariant")
    if choice not in KERNEL_CHOICES:
        raise ValueError(f"kernel choice must be one of {KERNEL_CHOICES}, got {choice!r}")
    return choice
