"""The one place drafter specs are parsed: for ``generate``, ``bench``, ``distill`` and the API.

A spec is ``"none"`` (target-only), ``"default"`` (the measured best for a built-in target),
a registered name (``"ngram"``, ...), an alias (``"hybrid"``), or a draft model / EAGLE head
by name or path (``"HEAD:fp16"`` / ``"HEAD:int8"`` / ``"HEAD:fp32"`` choose what a head's draft steps read);
any of the last three followed by ``"+ngram"`` runs prompt lookup first and that drafter where
the lookup finds nothing (:class:`HybridDrafter`).

A new drafter is one module plus one line here: ``register("name", Factory)``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from .eagle_head import DRAFT_WEIGHTS, is_eagle_dir, load_eagle_head
from ..models import ModelLoadError, load_causal_lm
from .base import Drafter
from .eagle import EagleDrafter
from .hybrid import HybridDrafter
from .lookup import PromptLookupDrafter
from .model import ModelDrafter

__all__ = ["register", "registered", "make_drafter", "load_drafter", "resolve_spec", "split_spec", "eagle_head_dir",
           "DEFAULT_DRAFTERS", "DEFAULT_DRAFT_MODEL", "EAGLE_DRAFT", "EAGLE_BUILTINS", "BUILTIN_DRAFT_MODELS",
           "default_drafter"]

DEFAULT_DRAFT_MODEL = "smollm2-135m-draft"
EAGLE_DRAFT = "smollm2-135m-eagle"
EAGLE_BUILTINS = {EAGLE_DRAFT: Path(__file__).parent.parent / "data" / EAGLE_DRAFT}
BUILTIN_DRAFT_MODELS = (DEFAULT_DRAFT_MODEL, EAGLE_DRAFT)  # the distilled drafters shipped with verispec

DEFAULT_DRAFTERS = {"smollm2-135m": EAGLE_DRAFT + "+ngram"}
"""``"default"`` per built-in target: the fastest drafter measured for it (BENCHMARKS.md)."""

ALIASES = {"hybrid": DEFAULT_DRAFT_MODEL + "+ngram"}
LOOKUP_SUFFIX = "+ngram"

_REGISTERED: dict[str, Callable[[], Drafter]] = {}


def register(name: str, factory: Callable[[], Drafter]) -> None:
    """Make ``name`` a drafter spec: ``factory()`` builds a fresh, unbound drafter for it."""
    if not name or any(c in name for c in "+:/") or name in ("none", "default") or name in ALIASES:
        raise ValueError(f"drafter name {name!r} must be non-empty, without '+', ':' or '/', and not reserved")
    _REGISTERED[name] = factory


def registered() -> list[str]:
    """The registered drafter names."""
    return sorted(_REGISTERED)


register("ngram", lambda: PromptLookupDrafter(max_branches=4))  # several matches as branches under k="tree"


def default_drafter(target: str | None) -> str:
    """The drafter spec ``"default"`` stands for with ``target``: its entry in ``DEFAULT_DRAFTERS``,
    else prompt lookup (a draft model or head is made for one target)."""
    return DEFAULT_DRAFTERS.get(target or "", "ngram")


def resolve_spec(spec: str, target: str | None = None) -> str:
    """``spec`` with ``"default"`` and aliases replaced by what they stand for."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"drafter spec must be a non-empty string, got {spec!r}")
    if spec == "default":
        spec = default_drafter(target)
    return ALIASES.get(spec, spec)


def split_spec(spec: str) -> tuple[str, bool]:
    """``(base, lookup_first)`` of a resolved spec: ``"X+ngram"`` is ``("X", True)``."""
    if spec.endswith(LOOKUP_SUFFIX) and spec != LOOKUP_SUFFIX:
        return spec[: -len(LOOKUP_SUFFIX)], True
    return spec, False


def make_drafter(spec: str, *, target: str | None = None, dtype: torch.dtype = torch.float32,
                 cache: dict[str, Drafter] | None = None) -> Drafter | None:
    """The drafter a spec names (see the module docstring), unbound; ``None`` for ``"none"``.

    ``cache`` (name -> drafter) lets callers that build several specs over the same draft
    model (``X`` and ``X+ngram``) load its weights once.

    Raises:
        ModelLoadError: the spec names no registered drafter and no loadable model (the message
            names the spec).
    """
    spec = resolve_spec(spec, target)
    if spec == "none":
        return None
    base, lookup_first = split_spec(spec)
    inner = _build(base, dtype, cache)
    return HybridDrafter(inner) if lookup_first else inner


def _build(base: str, dtype: torch.dtype, cache: dict[str, Drafter] | None) -> Drafter:
    if base in _REGISTERED:
        return _REGISTERED[base]()
    if cache is not None and base in cache:
        return cache[base]
    drafter = load_drafter(base, dtype=dtype)
    if cache is not None:
        cache[base] = drafter
    return drafter


def eagle_head_dir(spec: str) -> Path | None:
    """The EAGLE head directory ``spec`` names (``"eagle"`` or a built-in head's name, or a
    directory written by ``save_eagle_head``), or None if it names none.

    Raises:
        ModelLoadError: ``spec`` names a built-in head that is not installed.
    """
    name = EAGLE_DRAFT if spec == "eagle" else spec
    if name in EAGLE_BUILTINS:
        path = EAGLE_BUILTINS[name]
        if not is_eagle_dir(path):
            raise ModelLoadError(f"built-in EAGLE head {name!r} is not installed (expected {path})")
        return path
    return Path(spec) if is_eagle_dir(spec) else None


def load_drafter(spec: str, *, dtype: torch.dtype = torch.float32) -> ModelDrafter | EagleDrafter:
    """A model drafter from a name or path: an :class:`EagleDrafter` for EAGLE heads (``"eagle"``
    is the built-in one; ``"HEAD:fp32"`` / ``"HEAD:fp16"`` / ``"HEAD:int8"`` choose what its draft steps read, see
    :func:`verispec.drafters.eagle_head.bind_eagle`), else a :class:`ModelDrafter` over ``load_causal_lm(spec)``.

    Raises:
        ModelLoadError: the model cannot be loaded (the message names the argument).
    """
    base, _, weights = spec.rpartition(":")
    head_dir = eagle_head_dir(base) if base else None
    if head_dir is not None:
        if weights not in DRAFT_WEIGHTS:
            raise ModelLoadError(f"{spec!r}: an EAGLE head's weights must be one of {', '.join(DRAFT_WEIGHTS)}, "
                                 f"got {weights!r}")
        return EagleDrafter(load_eagle_head(head_dir, dtype=dtype), name=f"{head_dir.name}:{weights}",
                            weights=weights)
    head_dir = eagle_head_dir(spec)
    if head_dir is not None:  # a built-in head's directory is named after it
        return EagleDrafter(load_eagle_head(head_dir, dtype=dtype), name=head_dir.name)
    return ModelDrafter(load_causal_lm(spec, dtype=dtype))
