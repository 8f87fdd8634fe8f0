"""Drafting with an EAGLE head over the target's features (see :mod:`verispec.drafters.eagle_head`)."""

from __future__ import annotations

import torch

from .eagle_head import DRAFT_WEIGHTS, EagleDraftModel, EagleFiles, bind_eagle, features_match_logits
from ..models import CausalLM
from ..kv import KVRunner, left_pad, prefill
from .base import Draft, DraftAsk, DrafterBase
from .drawing import draft_chain

__all__ = ["EagleDrafter"]


class EagleDrafter(DrafterBase):
    """Drafts with an EAGLE head over the target's features.

    The head's KV cache holds one *pair* ``(f_{i-1}, x_i)`` per context position, only for
    positions whose target feature is known (the target computes ``f_i`` when it verifies
    position i). A proposal feeds the pending real pairs, then drafts step by step, feeding
    its own predicted feature beside each draft token; those speculative pairs are rolled back
    at ``update``, which brings the target's real features for the emitted tokens.
    """

    reads_target_features = True

    def __init__(self, files: EagleFiles, name: str = "eagle", *, weights: str = "auto") -> None:
        """``weights``: what each draft step reads, ``"auto"`` (a rule on the CPU's flags),
        ``"fp32"`` / ``"fp16"`` / ``"int8"``, or ``"measured"`` (timed) (see
        :func:`verispec.drafters.eagle_head.bind_eagle`)."""
        if weights not in DRAFT_WEIGHTS:
            raise ValueError(f"weights must be one of {DRAFT_WEIGHTS}, got {weights!r}")
        self.files = files
        self.name = name
        self.weights = weights
        self.model: EagleDraftModel | None = None
        self.vocab_map = files.vocab_map

    def bind(self, target: CausalLM) -> None:
        if not features_match_logits(target.model):
            raise ValueError(f"target {target.name!r} does not compute its logits as lm_head(final hidden "
                             "state); an EAGLE head cannot draft from its features")
        self.model = bind_eagle(self.files, target, weights=self.weights)
        self.lengths: list[int] = []  # context length per row
        self.pending_tok: list[list[int]] = []  # x_i not in the head's cache yet
        self.pending_feat: list[list[torch.Tensor]] = []  # f_{i-1} beside each
        self.runner = KVRunner(self.model, 0)
        self._real = self.runner.lengths.clone()  # cache length holding only real pairs

    def _bound(self) -> EagleDraftModel:
        if self.model is None:
            raise RuntimeError("EagleDrafter.bind(target) must be called before use")
        return self.model

    def add(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        """New rows join. Their prompts' pairs, but the last, go through the head here, prompts of
        one length together (:func:`~verispec.kv.prefill`), in runners of their own that then join
        the others': fed at the next proposal beside the rows already running, a 200-token prompt
        made every row's pass 200 columns wide and left as many hole columns in every row's cache
        (at 8 rows that cost more than speculation gained), and padded to the longest prompt, 16
        joining prompts cost the head a fifth of the target's prefill. The last pair stays
        pending: the proposal reads its logits."""
        model = self._bound()
        if features is None or len(features) != len(prompts):
            raise ValueError("EagleDrafter needs the target's prompt features (one [len(prompt) - 1, H] per prompt)")
        zero = torch.zeros(1, model.config.hidden_size, dtype=model.dtype)
        pairs = [(list(p), torch.cat([zero, f.to(model.dtype)])) for p, f in zip(prompts, features)]  # (x_i, f_{i-1})
        # prompts of one length together, never padded to the longest (see kv.prefill)
        joining = prefill(model, [p[:-1] for p, _ in pairs], features=[f[:-1] for _, f in pairs]).runner
        self.lengths += [len(p) for p in prompts]
        self.pending_tok += [p[-1:] for p, _ in pairs]
        self.pending_feat += [[f[-1:]] for _, f in pairs]
        self.runner.extend(joining)
        self._real = self.runner.lengths.clone()

    def keep(self, rows: torch.Tensor) -> None:
        self._bound()
        index = rows.tolist()
        self.lengths = [self.lengths[i] for i in index]
        self.pending_tok = [self.pending_tok[i] for i in index]
        self.pending_feat = [self.pending_feat[i] for i in index]
        self.runner.select(rows)
        self._real = self._real[rows.to(self._real.device)]

    def propose(self, ask: DraftAsk) -> Draft:
        model = self._bound()
        B = len(self.lengths)
        if B == 0 or int(ask.k.max()) == 0:
            return Draft(torch.zeros(B, 0, dtype=torch.int64), None, torch.zeros(B, dtype=torch.int64))
        logits, f_last = self._feed_pending()  # [B, V_d], [B, 1, H]
        positions = torch.tensor(self.lengths, dtype=torch.int64, device=model.device)  # slot 0's position
        feature = {"f": f_last}

        def step(d: torch.Tensor) -> torch.Tensor:  # the pair (f^, d): the head's own feature beside its draft
            out, feature["f"] = self.runner.forward(d[:, None], logits_to_keep=1, return_hidden=True,
                                                    features=feature["f"])
            return out[:, -1]

        return draft_chain(logits, step, ask, self.vocab_map, positions)[0]

    def _feed_pending(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed the pending real pairs (ragged: left-padded); the logits ``[B, V_d]`` and the
        predicted feature ``[B, 1, H]`` after each row's context."""
        if not any(self.pending_tok):
            raise RuntimeError("EAGLE head has no pending pair to draft from")
        logits, f_hat = self._feed(self.runner, self.pending_tok, self.pending_feat)
        B = len(self.pending_tok)
        self.pending_tok = [[] for _ in range(B)]
        self.pending_feat = [[] for _ in range(B)]
        self._real = self.runner.lengths.clone()  # the cache holds only real pairs up to here
        return logits[:, -1], f_hat[:, -1:]

    def _feed(self, runner: KVRunner, tokens: list[list[int]], feats: list[list[torch.Tensor]]
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed ragged pairs (tokens per row, their features as a list of ``[n, H]`` pieces per row;
        left-padded) through ``runner``: logits ``[B, 1, V_d]`` and predicted features ``[B, T, H]``."""
        model = self._bound()
        feed, live = left_pad(tokens)
        device = model.device
        feed, live = feed.to(device), live.to(device)
        f = torch.zeros(*feed.shape, model.config.hidden_size, dtype=model.dtype, device=device)
        f[live] = torch.cat([x.to(device) for row in feats for x in row])  # row-major, as live
        return runner.forward(feed, live, logits_to_keep=1, return_hidden=True, features=f)

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        model = self._bound()
        if features is None:
            raise ValueError("EagleDrafter.update needs the target's features for the emitted tokens")
        self.runner.truncate(self._real.to(self.runner.lengths.device))  # drop speculative pairs
        for b, new in enumerate(emitted):
            if not new:
                continue
            if features[b].shape[0] != len(new):
                raise ValueError(f"row {b}: {len(new)} emitted tokens but {features[b].shape[0]} features")
            self.pending_tok[b].extend(new)
            self.pending_feat[b].append(features[b].to(model.dtype))
            self.lengths[b] += len(new)
