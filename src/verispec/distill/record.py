"""Keep the target's final hidden states of every answer while it is generated, so a head is
trained on them without a second (teacher-forced) pass over prompt and answer.

:class:`FeatureRecorder` is a drafter that never drafts and reads the target's features: the
engine hands it, per row, the prompt's features at ``add`` and each emitted token's at
``update`` (the same calls an EAGLE head gets). Rows are numbered in the order they were
added; when a row leaves the batch its features ``[len(prompt) + len(answer) - 1, H]`` (every
position but the last, in float16) wait in :attr:`FeatureRecorder.finished` under that number.
"""

from __future__ import annotations

import torch

from ..draft import Draft
from ..drafters import DraftAsk, DrafterBase

__all__ = ["FeatureRecorder"]


class FeatureRecorder(DrafterBase):
    """A drafter that proposes nothing and records the target's features (see module doc)."""

    name = "feature-recorder"
    reads_target_features = True

    def __init__(self, dtype: torch.dtype = torch.float16) -> None:
        self.dtype = dtype
        self.live: list[tuple[int, list[torch.Tensor]]] = []  # per row: (number, feature chunks)
        self.finished: dict[int, torch.Tensor] = {}
        self._next = 0

    def add(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        if features is None or len(features) != len(prompts):
            raise ValueError("FeatureRecorder needs the target's prompt features, one per prompt")
        for f in features:
            self.live.append((self._next, [f.detach().to("cpu", self.dtype)]))
            self._next += 1

    def keep(self, rows: torch.Tensor) -> None:
        stay = set(rows.tolist())
        for b, (n, chunks) in enumerate(self.live):
            if b not in stay:
                self.finished[n] = torch.cat(chunks)
        self.live = [self.live[b] for b in rows.tolist()]

    def propose(self, ask: DraftAsk) -> Draft:
        B = len(self.live)
        return Draft(torch.zeros(B, 0, dtype=torch.int64), None, torch.zeros(B, dtype=torch.int64))

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        if features is None:
            raise ValueError("FeatureRecorder.update needs the target's features for the emitted tokens")
        for (_, chunks), new, f in zip(self.live, emitted, features):
            if new:
                chunks.append(f[: len(new)].detach().to("cpu", self.dtype))
