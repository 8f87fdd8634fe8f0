"""A small causal LM as drafter, with its own KV cache that follows the accepted tokens."""

from __future__ import annotations

import torch

from ..models import CausalLM
from ..kv import KVRunner, left_pad, prefill
from .base import Draft, DraftAsk, DrafterBase
from .drawing import draft_chain

__all__ = ["ModelDrafter"]


class ModelDrafter(DrafterBase):
    """A small causal LM sharing the target's tokenizer. It rolls its cache back on rejection.

    Invariant: the cache holds a prefix of each row's context; the rest of the context
    (``pending``: the last emitted token, or two when every draft was accepted) is fed at the
    start of the next proposal, so the draft cache sees every emitted token exactly once.
    """

    def __init__(self, model: CausalLM) -> None:
        self.lm = model
        self.contexts: list[list[int]] = []
        self.runner = KVRunner(model.model, 0)
        self._fed: list[list[int]] = []  # drafts fed to the cache in the last proposal, per row

    @property
    def name(self) -> str:
        return self.lm.name

    def bind(self, target: CausalLM) -> None:
        if target.tokenizer.get_vocab() != self.lm.tokenizer.get_vocab():
            raise ValueError(
                f"draft {self.lm.name!r} does not share the target's tokenizer ({target.name!r}); "
                "verispec needs the same token ids on both sides"
            )
        vmap = self.lm.vocab_map
        if vmap is not None and int(vmap.max()) >= target.vocab_size:
            raise ValueError(f"draft vocab_map has ids >= the target vocabulary size {target.vocab_size}")

    def add(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        # Prefill each new row's prompt but its last token (which stays pending), then append
        # those rows to the batch's cache.
        self.runner.extend(prefill(self.lm.model, [p[:-1] for p in prompts]).runner)
        self.contexts += [list(p) for p in prompts]
        self._fed += [[] for _ in prompts]

    def keep(self, rows: torch.Tensor) -> None:
        self.runner.select(rows)
        index = rows.tolist()
        self.contexts = [self.contexts[i] for i in index]
        self._fed = [self._fed[i] for i in index]

    def propose(self, ask: DraftAsk) -> Draft:
        B = len(self.contexts)
        if B == 0 or int(ask.k.max()) == 0:
            self._fed = [[] for _ in range(B)]
            return Draft(torch.zeros(B, 0, dtype=torch.int64), None, torch.zeros(B, dtype=torch.int64))
        device = self.lm.model.device
        logits = self._feed_pending()  # [B, V_d] after each row's context
        positions = torch.tensor([len(c) for c in self.contexts], dtype=torch.int64, device=device)  # slot 0

        def step(d: torch.Tensor) -> torch.Tensor:
            return self.runner.forward(d[:, None])[:, -1]

        draft, steps = draft_chain(logits, step, ask, self.lm.vocab_map, positions)
        self._fed = draft.tokens[:, :steps].tolist()  # the tokens that went through the cache
        return draft

    def _feed_pending(self) -> torch.Tensor:
        """Feed each row's context tokens the cache lacks (ragged: left-padded); ``[B, V_d]`` logits."""
        cached = self.runner.lengths.tolist()
        pending = [ctx[c:] for ctx, c in zip(self.contexts, cached)]
        if not all(pending):
            raise RuntimeError("draft cache holds a row's whole context; the newest token must stay pending")
        feed, live = left_pad(pending)
        device = self.lm.model.device
        return self.runner.forward(feed.to(device), live.to(device), logits_to_keep=1)[:, -1]

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        # A cached draft token stays valid iff it and every token before it equal what was
        # emitted at that position (its keys/values depend on exactly that prefix). The newest
        # emitted token always stays pending: the next proposal needs the logits it produces.
        keep = []
        for b, new in enumerate(emitted):
            fed, n = self._fed[b], 0
            while n < len(fed) and n < len(new) - 1 and fed[n] == new[n]:
                n += 1
            self.contexts[b].extend(new)
            keep.append(min(len(self.contexts[b]) - len(new) + n, len(self.contexts[b]) - 1))
        self._fed = [[] for _ in emitted]
        self.runner.truncate(torch.tensor(keep, dtype=torch.int64, device=self.runner.lengths.device))
