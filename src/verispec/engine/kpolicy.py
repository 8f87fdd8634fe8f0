"""Draft-length (K) policies, per row: each request's K schedule depends on its own history only.

* an int: that K every step;
* ``"heuristic"`` (HF's): +2 after a fully accepted draft, -1 otherwise;
* ``"auto"``: draft while the next token pays for itself. Every drafted token gets a predicted
  acceptance: a model drafter's token from the drafter's own probability of the token before it,
  calibrated online against what the target accepted in this request (per confidence bucket);
  a prompt-lookup token from its match length (the lookup's own estimate). After each drafted
  token the drafter asks :meth:`KRows.more` whether to draft the next: yes while the expected
  tokens per second of the pass still rise, counting the measured draft step and the wider
  verify pass. Before drafting at all, the first token's predicted acceptance decides whether a
  draft can pay: the empty draft (a plain target step) is a normal outcome, and after
  :data:`PROBE_EVERY` empty steps in a row one token is drafted to look again.
* ``"tree"``: ``"auto"`` with trees: a drafter that drafts trees (``drafts_trees``) is asked for up
  to ``max_k`` nodes per row, and the engine keeps the prefix of the tree (its nodes come best
  first) that maximises the expected tokens per second of the pass (:meth:`KRows.cut_tree`): a
  node's acceptance is the drafter's estimate calibrated online per row, its expected tokens the
  product along its path; a tree where several guesses pay, a chain or nothing where they do not.
  Whether a row drafts a tree or a chain at all is decided by what each has given it: tokens per
  pass over the pass's cost, decayed sums per mode; the cost is the step's wall clock for a
  measured row (its text does not depend on it) and the timing-free table for a fixed one (the
  verify width and a draft step per node fed). A row starts with
  :data:`MODE_WARMUP` tree passes, then as many chain passes, then drafts the better mode and tries
  the other once every :data:`MODE_PROBE` passes (a batch drafts trees only if every drafting row
  wants one). A measured row starts instead from what the two modes gave the decoder's earlier
  measured rows (:class:`ModeMemory`), once it has seen both.

Exactness: whether token i is drafted depends only on the tokens before it (never on token i
itself, nor on any draw of the current pass), so each drafted token is an unconditioned draw
from its q and the rule's proof holds.

Reproducibility: the costs are tables fixed before the request (:mod:`verispec.engine.costs`),
and each row reads one of two (:class:`~verispec.engine.costs.CostTables`):
a row flagged ``fixed`` (a seeded sampled "exact" row, whose text depends on its draft lengths) reads
the timing-free table, the others (greedy, Gumbel: text independent of draft lengths) the
measured one. The choice is a ``[B]`` mask applied with ``torch.where``, no per-row loop. The one
live timing is a measured "tree" row's choice between trees and chains (the step's wall clock):
it moves that row's speed, never its text; a fixed row's choice reads its table.

Load: a measured row reads the measured table at the batch's real size B (the rows of the
pass): the pass-width curve of B rows, V(B, w) / V(B, 1), against a draft step of B rows over a
one-token pass of B rows (:meth:`~verispec.engine.costs.PassCosts.table`,
:meth:`~verispec.engine.costs.PassCosts.draft_cost`). A wider batch is
less memory-bound, each extra token of its pass costs more, and its rows draft less, down to
nothing once a pass of B rows x 2 tokens costs about twice one of B x 1; in a batch of B >= 2 a
measured row's probe is drafted only if a surely accepted token would pay for the whole pass
(a row's draft widens every row's pass). In a batch the measured auto rows decide together
(the pass is as wide as its longest draft and a draft step runs every row): they draft a first
token, and each next one, while the batch's expected tokens over its pass cost rise, all of its
rows counted. A ``fixed`` row reads its table for one row at every B:
its draft lengths, hence its text, do not depend on what else runs, and it is not turned down
under load (the price of reproducible sampled text).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..draft import tree_outcome
from .costs import CostTables, PassCosts

__all__ = ["KPolicy", "KRows", "ModeMemory", "check_k", "parse_k", "BUCKETS", "PROBE_EVERY", "ADAPTIVE",
           "MODE_WARMUP", "MODE_PROBE"]

KPolicy = int | str  # an int, "heuristic", "auto" or "tree"
ADAPTIVE = ("auto", "tree")  # the policies that weigh the pass costs

BUCKETS = 10  # confidence buckets of width 0.1; bucket 0 is the first token of a draft
PROBE_EVERY = 8  # empty drafts in a row before one token is drafted anyway
# Pseudo-observations behind each bucket's prior. With 2, a dozen rejected first drafts at the start
# of an answer put a request below break-even for good (one probe per PROBE_EVERY empty steps
# rarely climbs back); with 8 it takes about forty, and on the built-in workloads tau rose or held.
_PRIOR_STRENGTH = 8.0
_FIRST_PRIOR = 0.5  # prior acceptance of a draft's first token
MODE_WARMUP = 4  # passes of each mode (trees first) before a "tree" row compares them
MODE_PROBE = 16  # passes of the better mode between two tries of the other
_MODE_DECAY = 0.9  # weight of a mode's past per new pass of that mode (the context grows, passes cost more)
_MEMORY_DECAY = 0.99  # the same across requests, per row-pass: the last few hundred passes count


def check_k(k: object, name: str = "k") -> KPolicy:
    """``k`` if it is a valid policy, else ``ValueError`` naming ``name``."""
    if isinstance(k, bool) or not (isinstance(k, int) or k in ("heuristic",) + ADAPTIVE):
        raise ValueError(f"{name} must be a positive int, 'heuristic', 'auto' or 'tree', got {k!r}")
    if isinstance(k, int) and not 1 <= k <= 64:
        raise ValueError(f"{name} must be in [1, 64], got {k}")
    return k


def parse_k(text: str, name: str = "--k") -> KPolicy:
    """A command-line K policy: an int in [1, 64], ``"auto"``, ``"tree"`` or ``"heuristic"`` (ValueError naming
    ``name`` otherwise; see :func:`check_k`)."""
    try:
        value: object = int(text)
    except ValueError:
        value = text
    return check_k(value, name)


def buckets_of(conf: torch.Tensor) -> torch.Tensor:
    """Bucket 1..BUCKETS of a confidence in [0, 1] (NaN: bucket 0, no information)."""
    b = (conf.nan_to_num(-1.0) * BUCKETS).floor().to(torch.int64).clamp(0, BUCKETS - 1) + 1
    return torch.where(torch.isnan(conf), 0, b)


class ModeMemory:
    """What trees and chains gave the measured "tree" rows of earlier requests (one per decoder):
    decayed sums of tokens per pass and of step seconds per mode, so that a new request starts
    from them instead of a warm-up. Only measured rows read or write it: a fixed row's choice must
    be a function of its own history (its text depends on it)."""

    def __init__(self) -> None:
        self.tokens = torch.zeros(2, dtype=torch.float64)  # [chain | tree]
        self.cost = torch.zeros(2, dtype=torch.float64)
        self.passes = torch.zeros(2, dtype=torch.int64)

    def known(self) -> bool:
        """Both modes seen for a warm-up's worth of passes."""
        return bool((self.passes >= MODE_WARMUP).all())

    def add(self, m: int, tokens: torch.Tensor, cost: torch.Tensor) -> None:
        """Passes of mode ``m``: one ``tokens [n]`` and ``cost [n]`` per row, added one after another."""
        n = len(tokens)
        w = _MEMORY_DECAY ** torch.arange(n - 1, -1, -1, dtype=torch.float64)  # [n] the later, the heavier
        self.tokens[m] = _MEMORY_DECAY ** n * self.tokens[m] + (w * tokens.double()).sum()
        self.cost[m] = _MEMORY_DECAY ** n * self.cost[m] + (w * cost.double()).sum()
        self.passes[m] += n


class KRows:
    """The draft-length policy state of every row of a batch (rows join with :meth:`add` and
    leave with :meth:`keep`)."""

    def __init__(self, max_k: int, memory: ModeMemory | None = None) -> None:
        self.max_k = max_k
        self.memory = memory  # the decoder's memory of the two modes (None: each row learns alone)
        self.k = torch.zeros(0, dtype=torch.int64)  # [B] fixed / heuristic K
        self.heuristic = torch.zeros(0, dtype=torch.bool)  # [B]
        self.auto = torch.zeros(0, dtype=torch.bool)  # [B] "auto" and "tree" rows
        self.tree = torch.zeros(0, dtype=torch.bool)  # [B] "tree" rows
        self.fixed = torch.zeros(0, dtype=torch.bool)  # [B] rows that read the timing-free cost table
        self.any_auto = False  # some row is "auto" (kept with ``auto``)
        self.tried = torch.zeros(0, BUCKETS + 1, dtype=torch.float64)  # [B, buckets] tested tokens
        self.passed = torch.zeros(0, BUCKETS + 1, dtype=torch.float64)  # [B, buckets] accepted ones
        self.idle = torch.zeros(0, dtype=torch.int64)  # [B] empty drafts in a row
        self.node_tried = torch.zeros(0, BUCKETS + 1, dtype=torch.float64)  # [B, buckets] tree nodes tested,
        self.node_passed = torch.zeros(0, BUCKETS + 1, dtype=torch.float64)  # by the drafter's own estimate
        self.asked = torch.zeros(0, dtype=torch.int64)  # [B] model tokens the last :meth:`ask` allowed
        self.mode_tokens = torch.zeros(0, 2, dtype=torch.float64)  # [B, chain | tree] decayed tokens per pass,
        self.mode_cost = torch.zeros(0, 2, dtype=torch.float64)  # and pass costs (seconds, or fixed rows: table units)
        self.mode_passes = torch.zeros(0, 2, dtype=torch.int64)  # [B, 2] passes drafted in each mode
        self.since_other = torch.zeros(0, dtype=torch.int64)  # [B] passes since the worse mode was tried
        prior = (torch.arange(BUCKETS + 1, dtype=torch.float64) - 0.5) / BUCKETS  # bucket centres
        prior[0] = _FIRST_PRIOR
        self.prior = prior  # [buckets]

    def add(self, policies: list[KPolicy], fixed: torch.Tensor | list[bool] | None = None) -> None:
        """Rows with these ``policies`` join; ``fixed [n]`` bool: which read the timing-free cost
        table (default: none)."""
        n = len(policies)
        fixed = torch.zeros(n, dtype=torch.bool) if fixed is None else torch.as_tensor(fixed, dtype=torch.bool)
        self.fixed = torch.cat([self.fixed, fixed.cpu().reshape(n)])
        start = [p if isinstance(p, int) else min(4, self.max_k) for p in policies]
        self.k = torch.cat([self.k, torch.tensor(start, dtype=torch.int64)])
        self.heuristic = torch.cat([self.heuristic, torch.tensor([p == "heuristic" for p in policies])])
        self.auto = torch.cat([self.auto, torch.tensor([p in ADAPTIVE for p in policies])])
        self.tree = torch.cat([self.tree, torch.tensor([p == "tree" for p in policies])])
        self.any_auto = bool(self.auto.any())
        self.tried = torch.cat([self.tried, torch.zeros(n, BUCKETS + 1, dtype=torch.float64)])
        self.passed = torch.cat([self.passed, torch.zeros(n, BUCKETS + 1, dtype=torch.float64)])
        self.idle = torch.cat([self.idle, torch.zeros(n, dtype=torch.int64)])
        zeros = torch.zeros(n, BUCKETS + 1, dtype=torch.float64)
        self.node_tried, self.node_passed = torch.cat([self.node_tried, zeros]), torch.cat([self.node_passed, zeros])
        tokens, cost = torch.zeros(n, 2, dtype=torch.float64), torch.zeros(n, 2, dtype=torch.float64)
        passes = torch.zeros(n, 2, dtype=torch.int64)
        if self.memory is not None and self.memory.known():  # measured rows start where earlier requests left off
            start = ~fixed[:, None]
            weight = MODE_WARMUP / self.memory.passes.clamp_min(1).double().clamp(max=1 / (1 - _MEMORY_DECAY))
            tokens = torch.where(start, self.memory.tokens * weight, tokens)  # MODE_WARMUP passes' worth each
            cost = torch.where(start, self.memory.cost * weight, cost)
            passes = torch.where(start, MODE_WARMUP, passes)
        self.mode_tokens = torch.cat([self.mode_tokens, tokens])
        self.mode_cost = torch.cat([self.mode_cost, cost])
        self.mode_passes = torch.cat([self.mode_passes, passes])
        self.since_other = torch.cat([self.since_other, torch.zeros(n, dtype=torch.int64)])

    def keep(self, rows: torch.Tensor) -> None:
        for name in ("k", "heuristic", "auto", "tree", "fixed", "tried", "passed", "idle", "node_tried", "node_passed",
                     "mode_tokens", "mode_cost", "mode_passes", "since_other"):
            setattr(self, name, getattr(self, name)[rows])
        self.any_auto = bool(self.auto.any())

    def predict(self, buckets: torch.Tensor) -> torch.Tensor:
        """Calibrated acceptance for ``buckets [B, ...]`` (row b's entries read row b's counts):
        the row's own counts over the prior."""
        rows = torch.arange(buckets.shape[0]).view(-1, *[1] * (buckets.dim() - 1)).expand_as(buckets)
        s = _PRIOR_STRENGTH
        return (self.passed[rows, buckets] + s * self.prior[buckets]) / (self.tried[rows, buckets] + s)

    def costs(self, costs: PassCosts | CostTables, max_w: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's cost table: verify costs ``[B, max_w + 1]`` (entry w: a pass of width w)
        and the draft step ``[B]``, from the fixed table for ``fixed`` rows and the measured one
        for the others."""
        t = CostTables.of(costs)
        B = len(self.k)
        measured = t.measured.table(max_w, rows=B)  # the batch's pass-width curve (see the module)
        fixed = t.fixed.table(max_w)  # one row's, whatever the batch
        step = t.measured.draft_cost(B)  # a draft step of the batch's rows, per row, in the same units
        if fixed is measured and step == t.fixed.draft_step:
            return measured.expand(B, -1), torch.full((B,), step, dtype=torch.float64)
        v = torch.where(self.fixed[:, None], fixed, measured)
        c = torch.where(self.fixed, t.fixed.draft_step, step).to(torch.float64)
        return v, c

    # -- before drafting ----------------------------------------------------------------------

    def ask(self, room: torch.Tensor, costs: PassCosts | CostTables, scoring: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """``(k, k_cap)`` per row: the model tokens to draft at most, and the scored (lookup)
        tokens a drafter may offer; auto rows whose first token cannot pay draft no model token."""
        k = torch.where(self.auto, torch.where(self._first_pays(costs), self.max_k, 0), self.k) if self.any_auto \
            else self.k
        cap = torch.where(self.auto, self.max_k, self.k) if scoring else k
        self.asked = torch.minimum(k, room)  # what :meth:`more` counts on (rows draft token i while i < asked)
        return self.asked, torch.minimum(torch.maximum(cap, k), room)

    def _pooled(self) -> torch.Tensor | None:
        """``[B]`` bool, the measured auto rows of a batch of B >= 2 (None if there are none, or
        B = 1): they decide together, because the pass is as wide as its longest draft (every
        row pays for it) and a draft step runs every row."""
        if len(self.k) < 2:
            return None
        group = self.auto & ~self.fixed
        return group if bool(group.any()) else None

    def _first_pays(self, costs: PassCosts | CostTables) -> torch.Tensor:
        """``[B]`` bool: a first draft token is expected to raise tokens per second (or a probe is
        due: in a batch of B >= 2, for a measured row only if a surely accepted token pays for
        the whole pass, B + 1 tokens for a pass of width 2 against B for one of width 1)."""
        B = len(self.k)
        a1 = self.predict(torch.zeros(B, dtype=torch.int64))
        v, c = self.costs(costs, 2)
        probe = self.idle >= PROBE_EVERY
        own = ((1 + a1) * v[:, 1] > v[:, 2] + c) | probe
        group = self._pooled()
        if group is None:
            return own
        # The measured rows' first tokens, together: the batch emits B tokens from a pass of width
        # 1, or B + (their acceptances) from one of width 2 and a draft step (per row: v, c of
        # their table, the batch's). Free where another row widens the pass anyway.
        g = group.nonzero()[0, 0]
        v1, v2, cg = v[g, 1], v[g, 2], c[g]
        wide = bool((own & self.auto & self.fixed).any() | (~self.auto & (self.k > 0)).any())
        pays = wide or bool((B + (a1 * group).sum()) * v1 > B * (v2 + cg))
        sure = bool((B + 1) * v1 > B * (v2 + cg))  # a probe: one surely accepted token pays for the pass
        return torch.where(group, pays | (probe & sure), own)

    def more(self, costs: PassCosts | CostTables) -> Callable[[int, torch.Tensor], torch.Tensor]:
        """The drafter's question after drafting token ``i`` (0-based) with confidence ``conf [B]``:
        which rows should draft token ``i + 1``. Non-auto rows always go on (to their own K)."""
        v, c = self.costs(costs, self.max_k + 2)  # [B, max_k + 3] seconds per verify width, [B]
        B = len(self.k)
        P = self.predict(torch.zeros(B, dtype=torch.int64))  # P(token 0 accepted)
        asked = getattr(self, "asked", None)
        if asked is None or len(asked) != B:
            asked = torch.full((B,), self.max_k, dtype=torch.int64)
        E = 1 + torch.where(asked > 0, P, 0.0)  # expected tokens of the pass with token 0 verified
        group = self._pooled()
        g = None if group is None else group.nonzero()[0, 0]
        state = {"P": P, "E": E, "going": asked > 0}

        def more(i: int, conf: torch.Tensor) -> torch.Tensor:
            j = i + 1  # tokens drafted so far
            going = state["going"] & (asked > j)  # rows that would draft token j
            P_next = state["P"] * self.predict(buckets_of(conf.detach().double().cpu()))
            cost = v[:, min(j + 1, v.shape[1] - 1)] + j * c
            cost_next = v[:, min(j + 2, v.shape[1] - 1)] + (j + 1) * c
            go = (state["E"] + P_next) * cost > state["E"] * cost_next  # the rate rises
            if group is not None:  # the batch's rate: all its rows' tokens over its pass (see _pooled)
                total = state["E"].sum()
                gain = (P_next * (group & going)).sum()
                wide = bool((going & ((go & self.auto & self.fixed) | ~self.auto)).any())
                pays = wide or bool((total + gain) * cost[g] > total * cost_next[g])
                go = torch.where(group, pays, go)
            go = go | ~self.auto
            state["going"] = going & go
            state["P"], state["E"] = P_next, torch.where(state["going"], state["E"] + P_next, state["E"])
            return go

        return more

    # -- after verifying ----------------------------------------------------------------------

    def observe(self, num_accepted: torch.Tensor, n_draft: torch.Tensor, confidence: torch.Tensor | None
                ) -> torch.Tensor | None:
        """After a verification: ``num_accepted [B]`` of ``n_draft [B]`` drafts; ``confidence [B, N]``
        the drafter's own probability of each drafted token (NaN or None: none). Returns the
        calibration evidence ``[3, buckets]`` (tokens tested, accepted, and the acceptance
        predicted for them before this update), or None."""
        full = (num_accepted == n_draft) & (n_draft > 0)
        self.k = torch.where(self.heuristic, torch.where(full, self.k + 2, self.k - 1).clamp(1, self.max_k), self.k)
        self.idle = torch.where(n_draft > 0, 0, self.idle + 1)
        if confidence is None or confidence.shape[1] == 0 or not self.any_auto:
            return None
        conf = confidence.detach().double().cpu()  # [B, N]
        B, N = conf.shape
        slots = torch.arange(N)
        tested = (slots < n_draft[:, None]) & (slots <= num_accepted[:, None]) & self.auto[:, None]  # [B, N]
        # token j's predictor is the confidence of token j - 1 (bucket 0 for the first token)
        prev = torch.cat([torch.full((B, 1), math.nan, dtype=torch.float64), conf[:, :-1]], dim=1)
        buckets = buckets_of(prev)
        buckets[:, 0] = 0
        # model tokens only: a copied chain (NaN confidence) has the lookup's own estimate, and its
        # failures must not lower the first-token estimate that decides whether the model drafts
        tested &= ~torch.isnan(conf) & ((slots[None] == 0) | ~torch.isnan(prev))
        accepted = tested & (slots < num_accepted[:, None])
        predicted = self.predict(buckets)  # [B, N] before this update
        evidence = torch.zeros(3, BUCKETS + 1, dtype=torch.float64)
        for i, x in enumerate((tested.double(), accepted.double(), predicted * tested)):
            evidence[i].scatter_add_(0, buckets.flatten(), x.flatten())
        self.tried.scatter_add_(1, buckets, tested.double())
        self.passed.scatter_add_(1, buckets, accepted.double())
        return evidence

    def cut(self, n_draft: torch.Tensor, accept_prob: torch.Tensor, costs: PassCosts | CostTables
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per auto row, the draft length <= ``n_draft`` that maximises expected tokens per second
        of verifying, for drafters that score their tokens from the past only (prompt lookup).

        With a_j = ``accept_prob[b, j]`` (P(draft j accepted | drafts < j accepted)), verifying
        the first K drafts emits E_K = 1 + sum_{j<=K} prod_{i<=j} a_i tokens in expectation and
        costs one pass of width K+1 (the drafting is already paid). Rows that are not auto, or
        with a NaN among their drafts, keep ``n_draft``. Returns (lengths ``[B]``, rows cut ``[B]``).
        """
        B, K = accept_prob.shape
        if K == 0 or not self.any_auto:
            return n_draft, torch.zeros(B, dtype=torch.bool)
        accept_prob = accept_prob.cpu()
        slots = torch.arange(K)
        drafted = slots[None] < n_draft[:, None]  # [B, K]
        rows = self.auto & ~(torch.isnan(accept_prob) & drafted).any(1) & (n_draft > 0)  # [B]
        a = torch.where(drafted, accept_prob, 0.0).nan_to_num(0.0).clamp(0.0, 1.0)  # [B, K]
        expected = torch.cat([torch.ones(B, 1, dtype=a.dtype), 1 + a.cumprod(1).cumsum(1)], 1)  # [B, K+1]
        cost = self.costs(costs, K + 1)[0][:, 1:].to(a.dtype)  # [B, K+1] widths 1..K+1
        rate = (expected / cost).masked_fill(torch.arange(K + 1)[None] > n_draft[:, None], -math.inf)
        return torch.where(rows, rate.argmax(1), n_draft), rows

    def squeeze(self, n_draft: torch.Tensor, accept_prob: torch.Tensor | None, confidence: torch.Tensor | None,
                costs: PassCosts | CostTables) -> torch.Tensor:
        """The measured auto rows' drafts cut to one common length N, the one that maximises the
        batch's expected tokens over the cost of its pass (as wide as its longest draft: a long
        lookup match in one row widens every row's pass), the drafting being paid already. Other
        rows keep ``n_draft`` (their drafts set a floor on the width); alone (B = 1), nothing
        changes. Token j's acceptance: ``accept_prob`` where the drafter scored it, else the
        calibrated estimate from the confidence of token j - 1 (:meth:`predict`)."""
        group = self._pooled()
        if group is None or not bool((n_draft[group] > 0).any()):
            return n_draft
        B, K = len(self.k), int(n_draft.max())
        slots = torch.arange(K)
        a = torch.full((B, K), math.nan, dtype=torch.float64)
        if accept_prob is not None:
            w = min(K, accept_prob.shape[1])
            a[:, :w] = accept_prob[:, :w].detach().double().cpu()
        prev = torch.full((B, K), math.nan, dtype=torch.float64)
        if confidence is not None and K > 1:
            w = min(K - 1, confidence.shape[1])
            prev[:, 1:1 + w] = confidence[:, :w].detach().double().cpu()
        buckets = buckets_of(prev)
        buckets[:, 0] = 0
        a = torch.where(torch.isnan(a), self.predict(buckets), a)
        a = torch.where(slots[None] < n_draft[:, None], a.clamp(0.0, 1.0), 0.0)
        E = torch.cat([torch.ones(B, 1, dtype=torch.float64), 1 + a.cumprod(1).cumsum(1)], 1)  # [B, K+1]
        v = self.costs(costs, K + 1)[0][group.nonzero()[0, 0]]  # the group's pass-width curve [K+2]
        return torch.where(group, n_draft.clamp(max=_shared_width(E, n_draft, group, v)), n_draft)

    # -- trees ---------------------------------------------------------------------------------

    def nodes(self, k: torch.Tensor) -> torch.Tensor | None:
        """``[B]`` the node budget of each row's tree (``max_k``), or ``None`` (chains for every row)
        unless every row that drafts is a "tree" row that wants a tree (:meth:`wants_trees`): a
        batch drafts trees or chains as a whole, so that a row of another policy drafts and cuts
        its chain as it would alone (its text, for a seeded sampled row, depends on that)."""
        drafting = k > 0
        trees = self.tree & drafting & self.wants_trees()
        if not bool(trees.any()) or bool((drafting & ~trees).any()):
            return None
        return torch.where(trees, self.max_k, 0)

    def wants_trees(self) -> torch.Tensor:
        """``[B]`` bool: the "tree" rows whose next pass should draft a tree: during the warm-up
        (:data:`MODE_WARMUP` passes of each mode, trees first), then where trees have given more
        tokens per cost than chains, except on every :data:`MODE_PROBE`-th pass, which tries the
        other mode. The measured rows of a batch (B >= 2) compare the batch's sums (they share its
        passes)."""
        better = self._better()
        warm_tree = self.mode_passes[:, 1] < MODE_WARMUP
        warm_chain = ~warm_tree & (self.mode_passes[:, 0] < MODE_WARMUP)
        probe = self.since_other >= MODE_PROBE
        want = torch.where(warm_tree, True, torch.where(warm_chain, False, better ^ probe))
        return want & self.tree

    def observe_mode(self, tree: bool, tokens: torch.Tensor, width: int, forwards: int, fed: int,
                     costs: PassCosts | CostTables, seconds: float) -> None:
        """After a pass that drafted trees (``tree``) or chains: each "tree" row that was asked to
        draft adds its ``tokens [B]`` (emitted) and what the pass cost. A measured row (text
        independent of its drafts) counts the step's wall clock, ``seconds``: drafting a tree
        (a dense q per node at T > 0) and its wider pass cost what they cost on this machine. A
        fixed row (seeded sampled: its text depends on its drafts) counts the timing-free table:
        a pass of ``width`` columns and ``forwards`` draft forwards that fed ``fed`` node positions
        per row (0: one per forward), each node priced at a draft step."""
        rows = self.tree & (self.asked > 0) if len(self.asked) == len(self.tree) else self.tree
        if not bool(rows.any()):
            return
        v, c = self.costs(costs, width)
        nodes = fed if tree and fed > forwards else forwards
        cost = torch.where(self.fixed, v[:, width] + nodes * c, seconds)  # [B]
        m = int(tree)
        better_before = self._better()
        self.mode_tokens[:, m] = torch.where(rows, _MODE_DECAY * self.mode_tokens[:, m] + tokens.double(),
                                             self.mode_tokens[:, m])
        self.mode_cost[:, m] = torch.where(rows, _MODE_DECAY * self.mode_cost[:, m] + cost, self.mode_cost[:, m])
        self.mode_passes[:, m] += rows.long()
        shared = rows & ~self.fixed
        if self.memory is not None and bool(shared.any()):
            self.memory.add(m, tokens.double()[shared], cost[shared])
        self.since_other = torch.where(rows, torch.where(better_before == tree, self.since_other + 1, 0),
                                       self.since_other)

    def _better(self) -> torch.Tensor:
        """``[B]`` bool: trees have given at least the tokens per cost of chains; the measured rows
        of a batch (B >= 2) by the batch's sums (they share its passes), the others by their own."""
        tokens, cost = self.mode_tokens, self.mode_cost  # [B, 2]
        group = self._pooled()
        if group is not None:
            g = group[:, None]
            tokens = torch.where(g, (tokens * g).sum(0, keepdim=True), tokens)
            cost = torch.where(g, (cost * g).sum(0, keepdim=True), cost)
        rate = tokens / cost.clamp_min(1e-12)
        return rate[:, 1] >= rate[:, 0]

    def predict_nodes(self, estimate: torch.Tensor) -> torch.Tensor:
        """``[B, N]`` calibrated P(node accepted | its parent was) from the drafter's own
        ``estimate [B, N]`` (NaN: the first-token prior), each row from its own counts."""
        buckets = buckets_of(estimate.detach().double().cpu())
        rows = torch.arange(buckets.shape[0])[:, None].expand_as(buckets)
        s = _PRIOR_STRENGTH
        prior = torch.where(buckets == 0, _FIRST_PRIOR, estimate.detach().double().cpu().nan_to_num(0.0).clamp(0, 1))
        return (self.node_passed[rows, buckets] + s * prior) / (self.node_tried[rows, buckets] + s)

    def cut_tree(self, num_draft: torch.Tensor, parents: torch.Tensor, estimate: torch.Tensor | None,
                 costs: PassCosts | CostTables) -> torch.Tensor:
        """Per row, how many of its tree's first nodes to verify (nodes come best first, so a
        prefix is a tree): the W <= ``num_draft`` maximising E_W / v(W + 1), with E_W = 1 + the
        sum over the first W nodes of P(node on the accepted path), the product of the calibrated
        acceptances along its path. The measured auto rows of a batch (B >= 2) share one W, the
        batch's best (the pass is as wide as its widest tree). Rows that are not auto keep
        ``num_draft``. ``parents [B, N]``, ``estimate [B, N]`` the drafter's ``accept_prob``."""
        B, N = parents.shape
        if N == 0 or not self.any_auto:
            return num_draft
        a = self.predict_nodes(estimate if estimate is not None else torch.full((B, N), math.nan))
        parents = parents.cpu()
        reach = torch.zeros(B, N + 1, dtype=torch.float64)  # slot 0: the root, reached surely
        reach[:, 0] = 1.0
        for i in range(N):  # topological order: the parent's reach is known
            reach[:, i + 1] = a[:, i] * reach.gather(1, (parents[:, i] + 1).clamp_min(0)[:, None])[:, 0]
        slots = torch.arange(N + 1)
        gain = torch.where(slots[None, 1:] <= num_draft[:, None], reach[:, 1:], 0.0)
        E = torch.cat([torch.ones(B, 1, dtype=torch.float64), 1 + gain.cumsum(1)], 1)  # [B, N+1] E_W
        v = self.costs(costs, N + 1)[0].to(torch.float64)  # [B, N+2] entry w: a pass of width w
        rate = (E / v[:, 1:]).masked_fill(slots[None] > num_draft[:, None], -math.inf)
        W = torch.where(self.auto, rate.argmax(1), num_draft)
        group = self._pooled()
        if group is None or not bool((num_draft[group] > 0).any()):
            return W
        return torch.where(group, num_draft.clamp(max=_shared_width(E, num_draft, group, v[group.nonzero()[0, 0]])), W)

    def observe_tree(self, path: torch.Tensor, parents: torch.Tensor, num_draft: torch.Tensor,
                     estimate: torch.Tensor | None) -> None:
        """Calibrate the node estimates: the nodes tested are those under the root or under a
        node of the accepted ``path [B, N]`` (node ids, -1 past its end); accepted, those on it."""
        if estimate is None or parents.shape[1] == 0 or not bool(self.tree.any()):
            return
        tested, accepted = tree_outcome(path, parents, num_draft)
        tested &= self.tree[:, None]
        accepted &= tested
        buckets = buckets_of(estimate.detach().double().cpu())
        self.node_tried.scatter_add_(1, buckets, tested.double())
        self.node_passed.scatter_add_(1, buckets, accepted.double())


def _shared_width(E: torch.Tensor, n_draft: torch.Tensor, group: torch.Tensor, v: torch.Tensor) -> int:
    """The draft width N the ``group [B]`` rows of a batch share: the one maximising the batch's
    expected tokens over the cost of its pass. ``E [B, K+1]``: a row's expected tokens with its
    first n drafts verified; rows outside the group keep their ``n_draft [B]`` (and the pass is at
    least as wide as theirs); ``v [K+2]``: the group's cost of a pass of width w."""
    K = E.shape[1] - 1
    N = torch.arange(K + 1)
    kept = E.gather(1, n_draft[:, None]).expand(-1, K + 1)
    cut = E.gather(1, torch.minimum(N[None], n_draft[:, None]))
    total = torch.where(group[:, None], cut, kept).sum(0)  # [K+1] the batch's expected tokens if cut at N
    floor = int(n_draft[~group].max()) if bool((~group).any()) else 0
    return int((total / v[torch.clamp(N, min=floor) + 1]).argmax())
