"""The target's and the model drafters' KV caches, rows advancing independently.

* :mod:`.batch`: :class:`KVRunner`, a causal LM over a batched cache whose rows each hold their
  own length (holes for padding and rejected drafts), tree passes, rows joining and leaving.
* :mod:`.layer`: :class:`GrowingLayer`, HF's cache layer appending into spare columns in place.
"""

from .batch import KVRunner, Prefill, left_pad, prefill, tapped_states
from .layer import GrowingLayer, growing_cache

__all__ = ["GrowingLayer", "KVRunner", "Prefill", "growing_cache", "left_pad", "prefill", "tapped_states"]
