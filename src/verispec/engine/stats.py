"""What a generation did: counts, times, acceptance per slot, and the bookkeeping behind them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..draft import node_depths, tree_outcome
from ..verify import Verification

__all__ = ["GenerationStats", "GenerationResult", "add_counts", "account", "account_tree", "account_copied",
           "tree_depths", "uncount", "add_calibration", "BONUS", "residual_origin", "copied_origin",
           "accepted_slot"]


@dataclass
class GenerationStats:
    """What one ``generate`` call did. Times are seconds of wall clock.

    A draft token is *tested* when every draft before it in its row was accepted; testing
    stops at the first rejection, so the drafts after it are never compared with the target.

    * ``alpha`` = accepted / tested = accepted / (accepted + rejected): the per-token acceptance
      rate of Leviathan et al., the alpha of ``E = (1 - alpha^(K+1)) / (1 - alpha)`` (its
      maximum-likelihood estimate when each tested token is accepted independently);
    * ``draft_acceptance`` = accepted / drafted (vLLM's "draft acceptance rate"): lower than
      alpha whenever drafts follow a rejection, e.g. 0.38 for alpha 0.65 at K = 4;
    * ``tau`` = emitted tokens per row-pass (``row_steps``; a row's prefill counts as one pass
      that drafted nothing, as it emits the row's first token; 1 for target-only);
    * ``per_position_acceptance[i]`` = P(draft slot i accepted | slots < i accepted);
    * ``copied_share`` = copied_accepted / accepted: the accepted drafts that prompt lookup copied
      from the context rather than a model drew (``Draft.copied``; 0 for a model alone).

    Only returned tokens count: drafts the verifier accepted after an EOS, or that a stop
    string cut off, are neither accepted nor tested (the draft counts as cut where its row
    ended; they stay in ``drafted``, as they were paid for), and a cut-off residual token
    takes its rejection with it.
    """

    drafted: int = 0
    accepted: int = 0
    rejected: int = 0  # row-passes whose drafts met a rejection (one per such row and pass)
    emitted: int = 0
    target_forwards: int = 0
    row_steps: int = 0  # sum over target forwards of the rows still generating, prefills included
    draft_forwards: int = 0
    copied_drafted: int = 0  # drafts copied from the context (prompt lookup), of ``drafted``
    copied_accepted: int = 0  # and of ``accepted``
    iterations: int = 0
    wall: float = 0.0
    time_prefill: float = 0.0
    time_target: float = 0.0
    time_draft: float = 0.0
    time_verify: float = 0.0
    slot_drafted: list[int] = field(default_factory=list)
    slot_tested: list[int] = field(default_factory=list)  # slot drafted and every slot before it accepted
    slot_accepted: list[int] = field(default_factory=list)
    k_history: list[int] = field(default_factory=list)
    draft_lengths: list[int] = field(default_factory=list)  # [n] = row-passes that drafted n tokens
    verify_width_seconds: dict[int, list[float]] = field(default_factory=dict)
    # the "auto" policy's calibration per confidence bucket (0: a draft's first token):
    # model tokens tested, accepted, and the sum of their predicted acceptance
    calibration: list[list[float]] = field(default_factory=lambda: [[], [], []])
    # draft trees: nodes tested (under the root or an accepted node) and accepted, per (depth, sibling rank)
    tree_tested: dict[tuple[int, int], int] = field(default_factory=dict)
    tree_accepted: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def tested(self) -> int:
        return self.accepted + self.rejected

    @property
    def alpha(self) -> float:
        return self.accepted / self.tested if self.tested else float("nan")

    @property
    def draft_acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def copied_share(self) -> float:
        return self.copied_accepted / self.accepted if self.accepted else float("nan")

    @property
    def tau(self) -> float:
        return self.emitted / self.row_steps if self.row_steps else float("nan")

    @property
    def time_other(self) -> float:
        return max(0.0, self.wall - self.time_prefill - self.time_target - self.time_draft - self.time_verify)

    @property
    def tokens_per_second(self) -> float:
        return self.emitted / self.wall if self.wall > 0 else float("nan")

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / t if t else float("nan") for a, t in zip(self.slot_accepted, self.slot_tested)]

    def as_dict(self) -> dict:
        keys = ("drafted", "accepted", "rejected", "emitted", "target_forwards", "row_steps", "draft_forwards",
                "copied_drafted", "copied_accepted", "iterations", "wall", "time_prefill", "time_target", "time_draft",
                "time_verify")
        d = {k: getattr(self, k) for k in keys}
        d.update(calibration=self.calibration, empty_drafts=self.draft_lengths[0] if self.draft_lengths else 0)
        d.update(alpha=self.alpha, draft_acceptance=self.draft_acceptance, tau=self.tau, time_other=self.time_other,
                 tokens_per_second=self.tokens_per_second, per_position_acceptance=self.per_position_acceptance,
                 copied_share=self.copied_share)
        if self.tree_tested:
            d["tree_acceptance"] = {f"{k[0]},{k[1]}": [self.tree_accepted.get(k, 0), n]
                                    for k, n in sorted(self.tree_tested.items())}
        return d


@dataclass
class GenerationResult:
    """Texts, token ids (generated only, prompt excluded), why each row stopped, and stats."""

    texts: list[str]
    token_ids: list[list[int]]
    finish_reasons: list[str]  # "length", "eos" or "stop"
    stats: GenerationStats


def account(stats: GenerationStats, out: Verification, n_draft: torch.Tensor, seen: torch.Tensor | None = None) -> None:
    """Add one verification of every row of the batch (``n_draft [B]`` drafts verified per row).
    For trees, ``seen [B]`` (:func:`tree_depths`): slot i is depth i + 1 of the accepted path."""
    nodes = n_draft
    n_draft = n_draft if seen is None else seen
    stats.iterations += 1
    stats.row_steps += n_draft.shape[0]
    if out.accepted.shape[1] == 0:  # nothing drafted (target-only, or every row drafted nothing)
        add_counts(stats.draft_lengths, [n_draft.shape[0]])
        return
    stats.drafted += int(nodes.sum())
    acc = out.accepted.cpu()  # [B, K], a prefix of each row's drafts
    stats.accepted += int(acc.sum())
    num_accepted = out.num_accepted.cpu()
    stats.rejected += int((num_accepted < n_draft).sum())
    K = out.accepted.shape[1]
    slots = torch.arange(K)[None]  # [1, K]
    drafted = slots < n_draft[:, None]  # [B, K]
    tested = drafted & (slots <= num_accepted[:, None])  # slot i tested iff slots < i accepted
    add_counts(stats.slot_drafted, drafted.sum(0).tolist())
    add_counts(stats.slot_tested, tested.sum(0).tolist())
    add_counts(stats.slot_accepted, acc.sum(0).tolist())
    add_counts(stats.draft_lengths, torch.bincount(nodes, minlength=K + 1).tolist())
    stats.k_history.append(int(nodes.max()))


def tree_depths(out: Verification, parents: torch.Tensor, n_draft: torch.Tensor) -> torch.Tensor:
    """``[B]`` a tree row's draft as the chain statistics see it: the accepted path, plus one
    rejected slot where the walk stopped at a node with children (a leaf ends in a bonus)."""
    parents = parents.cpu()
    B, N = parents.shape
    n_acc = out.num_accepted.cpu()
    if N == 0:
        return n_acc
    valid = torch.arange(N)[None] < n_draft[:, None]
    path = out.accepted_nodes().cpu()  # [B, N]
    last = torch.where(n_acc > 0, path.gather(1, (n_acc - 1).clamp_min(0)[:, None])[:, 0], -1)  # -1: the root
    has_kids = ((parents == last[:, None]) & valid).any(1)
    return n_acc + has_kids.long()


def account_tree(stats: GenerationStats, out: Verification, parents: torch.Tensor, n_draft: torch.Tensor) -> None:
    """Add a tree pass to the acceptance per (depth, sibling rank) (:func:`tree_outcome`)."""
    parents = parents.cpu()
    B, N = parents.shape
    if N == 0:
        return
    tested, accepted = tree_outcome(out.accepted_nodes(), parents, n_draft)
    earlier = torch.arange(N)[None, :] < torch.arange(N)[:, None]  # [N, N] j < i
    rank = ((parents[:, :, None] == parents[:, None, :]) & earlier[None]).sum(-1)  # [B, N] sibling rank
    key = node_depths(parents) * N + rank
    for name, mask in (("tree_tested", tested), ("tree_accepted", accepted)):
        table = getattr(stats, name)
        for k, n in enumerate(torch.bincount(key[mask]).tolist()):
            if n:
                table[(k // N, k % N)] = table.get((k // N, k % N), 0) + n


BONUS = -1  # origin of a token drawn from p: the bonus after every draft passed (or target-only)


def residual_origin(slot: int) -> int:
    """Origin code of the token drawn from the residual after draft ``slot`` was rejected."""
    return -2 - slot


COPIED = 1 << 16  # origin codes from here on: an accepted draft that prompt lookup copied


def copied_origin(slot: int) -> int:
    """Origin code of the accepted draft at ``slot`` when it was copied from the context."""
    return COPIED + slot


def accepted_slot(origin: int) -> int | None:
    """The draft slot of an accepted draft's origin code (copied or not), None for other tokens."""
    if origin < 0:
        return None
    return origin - COPIED if origin >= COPIED else origin


def account_copied(stats: GenerationStats, out: Verification, copied: torch.Tensor | None, n_draft: torch.Tensor
                   ) -> torch.Tensor:
    """Count the copied nodes (``copied [B, N]`` bool, ``Draft.copied``; None: none) among the
    ``n_draft [B]`` drafted and on the accepted path; returns ``[B, K]`` bool, whether the i-th
    accepted draft of each row was copied."""
    path = out.accepted_nodes().cpu()  # [B, K] node index of the i-th accepted draft, -1 after
    if copied is None or path.shape[1] == 0:
        return torch.zeros(path.shape, dtype=torch.bool)
    copied = copied.cpu()
    N = copied.shape[1]
    stats.copied_drafted += int((copied & (torch.arange(N)[None] < n_draft[:, None])).sum())
    on_path = copied.gather(1, path.clamp(0, max(N - 1, 0))) & (path >= 0)  # [B, K]
    stats.copied_accepted += int(on_path.sum())
    return on_path


def uncount(stats: GenerationStats, origins: Sequence[int]) -> None:
    """Take dropped tokens (after an EOS, or cut by a stop string) back out of the stats.

    ``origins`` codes one dropped token each: ``s >= 0`` an accepted draft at slot s
    (``copied_origin(s)`` when it was copied), ``BONUS``, or ``residual_origin(s)`` (drawn after
    slot s was rejected). The dropped tokens are always
    a suffix of their row, so this leaves the stats of a draft cut where the row now ends: its
    later slots count as drafted but not tested (neither accepted nor rejected), as nothing
    returned depends on their outcome.
    """
    for o in origins:
        slot = accepted_slot(o)
        if slot is not None:
            stats.accepted -= 1
            stats.copied_accepted -= int(o >= COPIED)
            stats.slot_accepted[slot] -= 1
            stats.slot_tested[slot] -= 1
        elif o != BONUS:
            stats.rejected -= 1
            stats.slot_tested[-2 - o] -= 1


def add_counts(total: list[int], counts: Sequence[int]) -> None:
    """``total[i] += counts[i]`` for every i, growing ``total`` with zeros as needed (in place):
    per-slot and per-length tallies whose length varies between passes and generations."""
    total.extend([0] * (len(counts) - len(total)))
    for i, n in enumerate(counts):
        total[i] += n


def add_calibration(stats: GenerationStats, evidence: torch.Tensor) -> None:
    """Add the K policy's calibration evidence ``[3, buckets]`` (tested, accepted, predicted)."""
    for total, counts in zip(stats.calibration, evidence.tolist()):
        total.extend([0.0] * (len(counts) - len(total)))
        for i, x in enumerate(counts):
            total[i] += x
