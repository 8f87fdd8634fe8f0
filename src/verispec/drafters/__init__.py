"""Drafters: propose tokens (and the q they were drawn from) for the target to verify.

* :mod:`.base`: the :class:`Drafter` protocol the engine drives, and :class:`DraftAsk`.
* :mod:`.drawing`: how model drafters draw tokens from their logits (:func:`sample_draft`).
* :mod:`.model`: a small causal LM sharing the target's tokenizer (:class:`ModelDrafter`).
* :mod:`.lookup`: prompt lookup, with per-token acceptance estimates (:class:`PromptLookupDrafter`).
* :mod:`.hybrid`: prompt lookup where it matches, a model elsewhere (:class:`HybridDrafter`).
* :mod:`.eagle`: an EAGLE head over the target's features (:class:`EagleDrafter`).
* :mod:`.registry`: drafter specs (``"ngram"``, ``"eagle+ngram"``, a path, ...) -> drafters.
"""

from ..draft import Draft
from .base import DraftAsk, Drafter, DrafterBase, stand_in_features
from .eagle import EagleDrafter
from .hybrid import HybridDrafter
from .lookup import PromptLookupDrafter
from .model import ModelDrafter
from .registry import (
                       BUILTIN_DRAFT_MODELS,
                       DEFAULT_DRAFT_MODEL,
                       DEFAULT_DRAFTERS,
                       EAGLE_BUILTINS,
                       EAGLE_DRAFT,
                       default_drafter,
                       eagle_head_dir,
                       load_drafter,
                       make_drafter,
                       register,
                       registered,
                       resolve_spec,
                       split_spec,
)
from .drawing import agreement, greedy_draft, sample_draft, to_target_vocab

__all__ = ["Draft", "DraftAsk", "Drafter", "DrafterBase", "stand_in_features", "ModelDrafter", "PromptLookupDrafter", "HybridDrafter",
           "EagleDrafter", "agreement", "to_target_vocab", "greedy_draft", "sample_draft", "make_drafter",
           "load_drafter", "eagle_head_dir", "register", "registered", "resolve_spec", "split_spec",
           "DEFAULT_DRAFTERS", "DEFAULT_DRAFT_MODEL", "EAGLE_DRAFT", "EAGLE_BUILTINS", "BUILTIN_DRAFT_MODELS",
           "default_drafter"]
