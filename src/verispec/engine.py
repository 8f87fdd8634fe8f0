"""The speculative decoding loop: draft, verify in one target pass, roll back, repeat.

One iteration for a batch of B rows (each row has emitted ``n_b`` tokens so far):

1. the drafter proposes up to ``k_b`` tokens per row (``k_b`` from the K policy, capped so
   a row never exceeds ``max_new_tokens``);
2. the target runs ONE forward over ``[last emitted token, d_1..d_K]`` -> p at K+1 slots;
3. :func:`verispec.verify` accepts a prefix and emits one more token per row;
4. the target's cache drops the rejected drafts (:class:`KVRunner.truncate`), the drafter is
   told what was emitted, EOS and stop strings end rows. A drafter that reads the target's
   features (``uses_target_features``, e.g. :class:`verispec.drafters.EagleDrafter`) also gets
   the target's final hidden states at the slots before each emitted token, from the same
   pass (and those of the prompt at prefill): no extra target computation.

The target cache holds every emitted token except the last one, which is fed at the start of
the next iteration together with the new drafts, so the prompt is prefilled exactly once.
Target-only decoding is the same loop with no drafter (K = 0): the same sampler and the same
counter-based draws, so baselines compare like with like.

Batches: rows are left-padded once at prefill and then advance independently; a rejected
draft leaves a *hole* in that row's cache columns (see :mod:`verispec.runner`), positions are
per row, and all randomness is keyed by (row seed, absolute position). A row therefore
produces the same tokens alone or in any batch (bit-identical at float64 in the tests).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .drafters import DraftContext, Drafter
from .models import CausalLM, load_causal_lm
from .rng import random_seeds
from .runner import KVRunner, left_pad
from .sampling import SamplingParams, logits_to_probs
from .verify import METHODS, verify

__all__ = ["SpeculativeDecoder", "GenerationResult", "GenerationStats", "KPolicy", "add_counts"]

KPolicy = int | str  # an int, "heuristic" or "auto"


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
    * ``tau`` = emitted tokens per row per target forward (prefill excluded; 1 for target-only);
    * ``per_position_acceptance[i]`` = P(draft slot i accepted | slots < i accepted).

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
    row_steps: int = 0  # sum over target forwards of the rows still generating
    draft_forwards: int = 0
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
                "iterations", "wall", "time_prefill", "time_target", "time_draft", "time_verify")
        d = {k: getattr(self, k) for k in keys}
        d.update(alpha=self.alpha, draft_acceptance=self.draft_acceptance, tau=self.tau, time_other=self.time_other,
                 tokens_per_second=self.tokens_per_second, per_position_acceptance=self.per_position_acceptance)
        return d


@dataclass
class GenerationResult:
    """Texts, token ids (generated only, prompt excluded), why each row stopped, and stats."""

    texts: list[str]
    token_ids: list[list[int]]
    finish_reasons: list[str]  # "length", "eos" or "stop"
    stats: GenerationStats


class SpeculativeDecoder:
    """Exact speculative decoding over a HuggingFace target and a drafter.

    Args:
        target: a :class:`CausalLM` or anything :func:`load_causal_lm` accepts.
        drafter: a :class:`Drafter`, or ``None`` for target-only decoding.
        k: draft length policy: an int (fixed), ``"heuristic"`` (HF's: +2 after a fully
            accepted draft, -1 otherwise) or ``"auto"`` (maximise expected tokens per second
            from the online acceptance estimate and measured draft / verify costs; drafters
            whose tokens carry acceptance estimates, such as prompt lookup, draft up to
            ``max_k`` and each row's draft is cut where the next token stops paying for the
            wider verify pass). Draft lengths never change the output's distribution, but they
            do change which text an "exact"-method sampled run draws for a seed: use a fixed
            int (or greedy, or "gumbel") for run-to-run and batch-independent text.
        method: ``"exact"`` (rejection sampling) or ``"gumbel"`` (drafter-invariant).
        max_k: upper bound for the adaptive policies.
    """

    def __init__(self, target: CausalLM | str, drafter: Drafter | None = None, *, k: KPolicy = 4,
                 method: str = "exact", max_k: int = 12) -> None:
        self.target = target if isinstance(target, CausalLM) else load_causal_lm(target)
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if isinstance(k, bool) or not (isinstance(k, int) or k in ("heuristic", "auto")):
            raise ValueError(f"k must be a positive int, 'heuristic' or 'auto', got {k!r}")
        if isinstance(k, int) and not 1 <= k <= 64:
            raise ValueError(f"k must be in [1, 64], got {k}")
        if not 1 <= max_k <= 64:
            raise ValueError(f"max_k must be in [1, 64], got {max_k}")
        self.drafter = drafter
        self.k, self.method, self.max_k = k, method, max_k
        if drafter is not None:
            drafter.bind(self.target)
        self.last_result: GenerationResult | None = None

    # ------------------------------------------------------------------------------------------

    def encode(self, prompts: Sequence[str | Sequence[int]], chat: bool = False) -> list[list[int]]:
        """Token ids for each prompt (strings go through the tokenizer, with the chat template if ``chat``).

        A prompt is a ``str`` or its token ids: a list/tuple of ints or a 1-D integer tensor or
        array. Anything else (bytes, floats, bools, nested lists) raises ``TypeError`` naming it.
        """
        tok = self.target.tokenizer
        if isinstance(prompts, (bytes, bytearray)):
            raise TypeError("prompts is bytes: decode it to str first (or pass token ids)")
        if isinstance(prompts, str) or not isinstance(prompts, Sequence):
            raise TypeError(f"prompts must be a list of strings or of token-id lists, got {type(prompts).__name__}")
        if len(prompts) == 0:
            raise ValueError("prompts is empty")
        out = []
        for i, p in enumerate(prompts):
            if isinstance(p, str):
                if chat:
                    if not getattr(tok, "chat_template", None):
                        raise ValueError(f"chat=True but the tokenizer of {self.target.name!r} has no chat template")
                    ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=False)
                    ids = list(ids["input_ids"]) if isinstance(ids, dict) else list(ids)
                else:
                    ids = tok(p, add_special_tokens=True)["input_ids"]
            else:
                if not isinstance(p, (Sequence, torch.Tensor, np.ndarray)):
                    raise TypeError(f"prompts[{i}] must be a string or a list of token ids, got {type(p).__name__}")
                ids = _int_list(p, f"prompts[{i}]")
                bad = [t for t in ids if not 0 <= t < self.target.vocab_size]
                if bad:
                    raise ValueError(f"prompts[{i}] has token ids outside [0, {self.target.vocab_size}): {bad[:5]}")
            if len(ids) == 0:
                raise ValueError(f"prompts[{i}] is empty (no tokens to condition on)")
            out.append(ids)
        return out

    def generate(
        self,
        prompts: str | Sequence[str | Sequence[int]],
        max_new_tokens: int = 128,
        sampling: SamplingParams | None = None,
        *,
        stop: Sequence[str] | None = None,
        stream: bool = False,
        chat: bool = False,
        seeds: Sequence[int] | None = None,
    ) -> GenerationResult | Iterator[str]:
        """Generate continuations of ``prompts``.

        Args:
            prompts: a string, or a list of strings or token-id lists.
            max_new_tokens: exactly this many tokens per row unless EOS or a stop string ends it.
            sampling: the sampling transform; default ``SamplingParams()`` (temperature 1).
            stop: strings that end a row; the text is cut before the stop string.
            stream: return an iterator of text pieces of a single prompt, yielded as tokens are
                accepted; the full result is in ``self.last_result`` afterwards.
            chat: apply the tokenizer's chat template to string prompts.
            seeds: one int64 seed per row (default: ``sampling.seed`` for every row, or fresh
                seeds from torch's global generator).
        """
        sampling = sampling or SamplingParams()
        if not isinstance(sampling, SamplingParams):
            raise TypeError("sampling must be a SamplingParams")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        single = isinstance(prompts, str)
        ids = self.encode([prompts] if single else prompts, chat=chat)
        if stop is not None and (isinstance(stop, str) or not isinstance(stop, Sequence)
                                 or any(not isinstance(s, str) or not s for s in stop)):
            raise ValueError(f"stop must be a list of non-empty strings, got {stop!r}")
        limit = getattr(self.target.model.config, "max_position_embeddings", None)
        for i, p in enumerate(ids):
            if limit is not None and len(p) + max_new_tokens > limit:
                raise ValueError(f"prompts[{i}] has {len(p)} tokens; with max_new_tokens={max_new_tokens} "
                                 f"it exceeds the model's context of {limit} tokens")
        B = len(ids)
        if seeds is not None:
            seed_t = torch.tensor(_int64_seeds(seeds), dtype=torch.int64)
            if len(seed_t) != B:
                raise ValueError(f"seeds has {len(seed_t)} entries for {B} prompts")
        elif sampling.seed is not None:
            seed_t = torch.full((B,), sampling.seed, dtype=torch.int64)
        else:
            seed_t = random_seeds(B)
        if stream:
            if B != 1:
                raise ValueError("stream=True takes a single prompt")
            return self._stream(ids, max_new_tokens, sampling, stop, seed_t)
        for _ in self._run(ids, max_new_tokens, sampling, stop, seed_t):
            pass
        assert self.last_result is not None
        return self.last_result

    def _stream(self, ids, max_new_tokens, sampling, stop, seeds) -> Iterator[str]:
        sent = ""
        for text in self._run(ids, max_new_tokens, sampling, stop, seeds):
            if text[0].endswith("\ufffd"):  # half a multi-byte character: wait for the rest
                continue
            # Hold back a tail that may be the start of a stop string: a piece once yielded
            # cannot be taken back when the next tokens complete the stop string.
            safe = len(text[0]) - _stop_prefix_tail(text[0], stop or ())
            if safe > len(sent):
                yield text[0][len(sent):safe]
                sent = text[0][:safe]
        final = self.last_result.texts[0]
        if len(final) > len(sent):
            yield final[len(sent):]

    # ------------------------------------------------------------------------------------------

    def _run(self, prompts: list[list[int]], max_new: int, sampling: SamplingParams,
             stop: Sequence[str] | None, seeds: torch.Tensor) -> Iterator[list[str]]:
        """The loop. Yields the texts so far after every iteration; sets ``self.last_result``."""
        t_start = time.perf_counter()
        stats = GenerationStats()
        B = len(prompts)
        tok = self.target.tokenizer
        model = self.target.model
        device = model.device
        V = self.target.vocab_size
        eos_ids = self.target.eos_token_ids
        dtype = model.dtype if model.dtype in (torch.float32, torch.float64) else torch.float32

        # Prefill: the whole prompt except its last token, which starts the first iteration.
        t0 = time.perf_counter()
        target = KVRunner(model, B)
        drafter = self.drafter
        # An EAGLE-style drafter reads the target's final hidden states (its "features").
        wants_features = bool(getattr(drafter, "uses_target_features", False))
        features: list[torch.Tensor] | None = None
        if max(len(p) for p in prompts) > 1:
            feed, live = left_pad([p[:-1] for p in prompts])
            out = target.forward(feed.to(device), live.to(device), logits_to_keep=1, return_hidden=wants_features)
            if wants_features:
                hidden = out[1].cpu()  # [B, width-1, H], rows left-padded
                features = [hidden[b, hidden.shape[1] - (len(p) - 1):] for b, p in enumerate(prompts)]
        elif wants_features:
            features = [torch.zeros(0, model.config.hidden_size) for _ in prompts]
        last = torch.tensor([p[-1] for p in prompts], dtype=torch.int64)
        if drafter is not None:
            drafter.start(DraftContext(prompts, sampling, seeds, self.method, V, dtype, features))
        stats.time_prefill = time.perf_counter() - t0

        generated: list[list[int]] = [[] for _ in range(B)]
        origins: list[list[int]] = [[] for _ in range(B)]  # per generated token: see _uncount
        finish: list[str | None] = [None] * B
        texts = [""] * B
        policy = _KState(self.k, self.max_k, B) if drafter is not None else None
        scores = self.k == "auto" and bool(getattr(drafter, "scores_drafts", False))
        prompt_len = torch.tensor([len(p) for p in prompts], dtype=torch.int64)

        while any(f is None for f in finish):
            active = torch.tensor([f is None for f in finish])
            remaining = torch.tensor([max_new - len(g) for g in generated], dtype=torch.int64)
            # Draft: at most remaining-1 tokens, so that drafts + the bonus never overshoot.
            if drafter is not None:
                k_rows = torch.minimum(policy.k_rows(), remaining - 1).clamp_min(0) * active
                # Drafters that score their tokens (prompt lookup) may propose up to max_k under
                # "auto"; each row's draft is then cut where it stops paying (policy.cut).
                k_cap = torch.minimum(torch.full_like(k_rows, self.max_k), remaining - 1).clamp_min(0) * active
                t0 = time.perf_counter()
                draft = drafter.propose(k_rows, k_lookup=k_cap) if scores else drafter.propose(k_rows)
                stats.time_draft += time.perf_counter() - t0
                stats.draft_forwards += draft.forwards
                n_draft = torch.minimum(draft.num_draft, k_cap if scores else k_rows)
                scored = torch.zeros(B, dtype=torch.bool)
                if scores and draft.accept_prob is not None:
                    n_draft, scored = policy.cut(n_draft, draft.accept_prob)
                # Verify only as wide as the longest draft: a pass of K+1 tokens costs more than
                # one of fewer (a prompt-lookup miss should cost a one-token step, not K+1).
                width = int(n_draft.max())
                d_tok = draft.tokens[:, :width]
                q = None if draft.probs is None else draft.probs[:, :width]
            else:
                d_tok, q, n_draft = torch.zeros(B, 0, dtype=torch.int64), None, torch.zeros(B, dtype=torch.int64)
            K = d_tok.shape[1]

            # Target: one pass over [last, d_1..d_K] gives p at K+1 slots.
            t0 = time.perf_counter()
            feed = torch.cat([last[:, None], d_tok], dim=1)
            if wants_features:
                logits, hidden = target.forward(feed.to(device), return_hidden=True)  # [B, K+1, V_t], [B, K+1, H]
            else:
                logits = target.forward(feed.to(device))  # [B, K+1, V_t]
            dt = time.perf_counter() - t0
            stats.time_target += dt
            stats.target_forwards += 1
            stats.verify_width_seconds.setdefault(K + 1, []).append(dt)

            t0 = time.perf_counter()
            logits = _fit_vocab(logits.to(dtype), V).cpu()
            p = logits_to_probs(logits, sampling)  # [B, K+1, V]
            positions = prompt_len + torch.tensor([len(g) for g in generated])  # slot 0's absolute position
            out = verify(p, q, d_tok, num_draft=n_draft, seeds=seeds, positions=positions,
                         method=self.method, greedy=sampling.greedy, validate=False)
            stats.time_verify += time.perf_counter() - t0

            # Bookkeeping: emitted tokens per row, EOS / length / stop. The stats count the whole
            # verification first; tokens then dropped (after an EOS, or by a stop string below)
            # are taken back out by their origins, so stats describe only the tokens returned.
            self._account(stats, out, n_draft, active)
            n_emit = out.num_emitted.tolist()
            n_acc = out.num_accepted.tolist()
            n_dr = n_draft.tolist()
            rows_tokens = out.tokens.tolist()
            emitted: list[list[int]] = []
            for b in range(B):
                if finish[b] is not None:
                    emitted.append([])
                    continue
                new = rows_tokens[b][: n_emit[b]]
                # accepted drafts at slots 0..n_acc-1, then the bonus or the residual after a rejection
                why = list(range(n_acc[b])) + [_BONUS if n_acc[b] == n_dr[b] else _residual_origin(n_acc[b])]
                for i, t in enumerate(new):
                    if t in eos_ids:
                        _uncount(stats, why[i + 1:])
                        new, why = new[: i + 1], why[: i + 1]
                        finish[b] = "eos"
                        break
                generated[b].extend(new)
                origins[b].extend(why)
                emitted.append(new)
                if finish[b] is None and len(generated[b]) >= max_new:
                    finish[b] = "length"
            if policy is not None:
                policy.observe(out, n_draft, active & ~scored, stats)  # scored rows have their own estimates

            # Roll back: the target keeps everything emitted except the newest token.
            kept = prompt_len + torch.tensor([len(g) for g in generated]) - 1
            target.truncate(kept.to(device))
            last = torch.tensor([g[-1] if g else p_[-1] for g, p_ in zip(generated, prompts)], dtype=torch.int64)
            if wants_features:  # the target's features at the slots before each emitted token
                hidden = hidden.cpu()
                drafter.update(emitted, features=[hidden[b, : len(e)] for b, e in enumerate(emitted)])
            elif drafter is not None:
                drafter.update(emitted)

            # Decode only the rows that ran in this pass: a finished row's text is final (re-decoding
            # a row cut by a stop string would bring back the stop string's start in its last token).
            for b in torch.nonzero(active).flatten().tolist():
                texts[b] = tok.decode(generated[b], skip_special_tokens=True)
                cut = _find_stop(texts[b], stop) if stop else None
                if cut is not None:
                    texts[b] = texts[b][:cut]
                    n_keep = len(_trim_to_text(tok, generated[b], texts[b]))
                    _uncount(stats, origins[b][n_keep:])
                    generated[b], origins[b] = generated[b][:n_keep], origins[b][:n_keep]
                    finish[b] = "stop"
            yield list(texts)

        stats.wall = time.perf_counter() - t_start
        stats.emitted = sum(len(g) for g in generated)
        self.last_result = GenerationResult(texts, generated, [f or "length" for f in finish], stats)

    def target_step_seconds(self, context: Sequence[int], repeats: int = 3) -> float:
        """Median seconds of one-token target forwards after ``context`` (for speedup estimates)."""
        runner = KVRunner(self.target.model, 1)
        device = self.target.model.device
        ids = torch.tensor([list(context)], dtype=torch.int64, device=device)
        runner.forward(ids, logits_to_keep=1)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            runner.forward(ids[:, -1:], logits_to_keep=1)
            times.append(time.perf_counter() - t0)
            runner.truncate(runner.lengths - 1)
        return sorted(times)[len(times) // 2]

    @staticmethod
    def _account(stats: GenerationStats, out, n_draft: torch.Tensor, active: torch.Tensor) -> None:
        stats.iterations += 1
        stats.row_steps += int(active.sum())
        n_draft = n_draft * active
        stats.drafted += int(n_draft.sum())
        acc = out.accepted & active[:, None]  # [B, K], a prefix of each row's drafts
        stats.accepted += int(acc.sum())
        stats.rejected += int(((out.num_accepted < n_draft) & active).sum())
        K = out.accepted.shape[1]
        slots = torch.arange(K)[None]  # [1, K]
        drafted = slots < n_draft[:, None]  # [B, K]
        tested = drafted & (slots <= out.num_accepted[:, None])  # slot i tested iff slots < i accepted
        add_counts(stats.slot_drafted, drafted.sum(0).tolist())
        add_counts(stats.slot_tested, tested.sum(0).tolist())
        add_counts(stats.slot_accepted, acc.sum(0).tolist())
        add_counts(stats.draft_lengths, torch.bincount(n_draft[active.bool()], minlength=K + 1).tolist())
        if K:
            stats.k_history.append(int(n_draft.max()))


class _KState:
    """Draft-length policy state (per row for the heuristic, shared estimates for auto)."""

    def __init__(self, k: KPolicy, max_k: int, B: int) -> None:
        self.policy = k
        self.max_k = max_k
        start = k if isinstance(k, int) else min(4, max_k)
        self.k = torch.full((B,), start, dtype=torch.int64)
        # auto: acceptance estimate (Beta prior ~ alpha 0.6) and cost estimates.
        self.tested, self.passed = 2.5, 1.5
        self.draft_step = None  # seconds per draft step
        self.verify = {}  # width -> EMA seconds

    def k_rows(self) -> torch.Tensor:
        return self.k.clone()

    def observe(self, out, n_draft: torch.Tensor, active: torch.Tensor, stats: GenerationStats) -> None:
        if self.policy == "heuristic":
            full = (out.num_accepted == n_draft) & (n_draft > 0)
            self.k = torch.where(full, self.k + 2, self.k - 1).clamp(1, self.max_k)
        elif self.policy == "auto":
            # Per-token acceptance MLE under the geometric model: accepted / comparisons made.
            rejected = (out.num_accepted < n_draft) & active
            self.passed += float((out.num_accepted * active).sum())
            self.tested += float((out.num_accepted * active).sum() + rejected.sum())
            if stats.draft_forwards and stats.time_draft > 0:
                self.draft_step = stats.time_draft / max(1, stats.draft_forwards)
            for w, ts in stats.verify_width_seconds.items():
                self.verify[w] = sorted(ts)[len(ts) // 2]
            self.k = torch.full_like(self.k, self.best_k())

    def verify_cost(self, w: int) -> float:
        """Seconds of a target pass of width ``w``: the median measured, else interpolated between
        the nearest measured widths, else extrapolated from the nearest with a gentle slope (low
        enough that an unmeasured width gets tried once)."""
        if not self.verify:
            return 1.0 + 0.05 * (w - 1)  # nothing measured yet: relative units
        if w in self.verify:
            return self.verify[w]
        widths = sorted(self.verify)
        lo = max((x for x in widths if x < w), default=None)
        hi = min((x for x in widths if x > w), default=None)
        if lo is not None and hi is not None:
            return self.verify[lo] + (self.verify[hi] - self.verify[lo]) * (w - lo) / (hi - lo)
        ref = lo if lo is not None else hi
        return self.verify[ref] * max(0.5, 1 + 0.05 * (w - ref))  # 5% per token, either way

    def best_k(self) -> int:
        """argmax_K E[tokens]/cost with E = (1-a^(K+1))/(1-a), cost = K*draft + verify(K+1) (Leviathan 3.8)."""
        a = min(self.passed / self.tested, 0.999)
        if not self.verify:
            return int(self.k[0])
        base = self.verify.get(1, min(self.verify.values()))
        draft = self.draft_step if self.draft_step is not None else 0.05 * base
        best, best_rate = 1, -1.0
        for K in range(1, self.max_k + 1):
            tokens = (1 - a ** (K + 1)) / (1 - a)
            rate = tokens / (K * draft + self.verify_cost(K + 1))
            if rate > best_rate:
                best, best_rate = K, rate
        return best

    def cut(self, n_draft: torch.Tensor, accept_prob: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row, the draft length <= ``n_draft`` that maximises expected tokens per second.

        With a_j = ``accept_prob[b, j]`` (P(draft j accepted | drafts < j accepted)), verifying
        the first K drafts emits E_K = 1 + sum_{j<=K} prod_{i<=j} a_i tokens in expectation and
        costs one pass of width K+1 (the drafting is already paid). Rows with a NaN among their
        drafts keep ``n_draft``. Returns (lengths ``[B]``, rows cut ``[B]`` bool).
        """
        B, K = accept_prob.shape
        if K == 0:
            return n_draft, torch.zeros(B, dtype=torch.bool)
        slots = torch.arange(K)
        drafted = slots[None] < n_draft[:, None]  # [B, K]
        rows = ~(torch.isnan(accept_prob) & drafted).any(1) & (n_draft > 0)  # [B]
        a = torch.where(drafted, accept_prob, 0.0).nan_to_num(0.0).clamp(0.0, 1.0)  # [B, K]
        expected = torch.cat([torch.ones(B, 1, dtype=a.dtype), 1 + a.cumprod(1).cumsum(1)], 1)  # [B, K+1]
        cost = torch.tensor([self.verify_cost(w) for w in range(1, K + 2)], dtype=a.dtype)  # [K+1]
        rate = (expected / cost).masked_fill(torch.arange(K + 1)[None] > n_draft[:, None], -math.inf)
        return torch.where(rows, rate.argmax(1), n_draft), rows


_BONUS = -1  # origin of a token drawn from p: the bonus after every draft passed (or target-only)


def _residual_origin(slot: int) -> int:
    """Origin code of the token drawn from the residual after draft ``slot`` was rejected."""
    return -2 - slot


def _uncount(stats: GenerationStats, origins: Sequence[int]) -> None:
    """Take dropped tokens (after an EOS, or cut by a stop string) back out of the stats.

    ``origins`` codes one dropped token each: ``s >= 0`` an accepted draft at slot s, ``_BONUS``,
    or ``_residual_origin(s)`` (drawn after slot s was rejected). The dropped tokens are always
    a suffix of their row, so this leaves the stats of a draft cut where the row now ends: its
    later slots count as drafted but not tested (neither accepted nor rejected), as nothing
    returned depends on their outcome.
    """
    for o in origins:
        if o >= 0:
            stats.accepted -= 1
            stats.slot_accepted[o] -= 1
            stats.slot_tested[o] -= 1
        elif o != _BONUS:
            stats.rejected -= 1
            stats.slot_tested[-2 - o] -= 1


def add_counts(total: list[int], counts: Sequence[int]) -> None:
    """``total[i] += counts[i]`` for every i, growing ``total`` with zeros as needed (in place):
    per-slot and per-length tallies whose length varies between passes and generations."""
    total.extend([0] * (len(counts) - len(total)))
    for i, n in enumerate(counts):
        total[i] += n


def _int_list(p: object, name: str, what: str = "token id") -> list[int]:
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


def _int64_seeds(seeds: object) -> list[int]:
    """``seeds`` as Python ints that fit int64, the key of the counter-based RNG."""
    values = _int_list(seeds, "seeds", "seed")
    for i, v in enumerate(values):
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"seeds[{i}] = {v} does not fit in int64 [-2**63, 2**63)")
    return values


def _fit_vocab(logits: torch.Tensor, V: int) -> torch.Tensor:
    """Cut or pad (with -inf) the target's logits to the engine's vocabulary size V."""
    Vt = logits.shape[-1]
    if Vt == V:
        return logits
    if Vt > V:
        return logits[..., :V]
    return torch.cat([logits, logits.new_full((*logits.shape[:-1], V - Vt), -math.inf)], dim=-1)


def _find_stop(text: str, stop: Sequence[str]) -> int | None:
    hits = [text.find(s) for s in stop if s in text]
    return min(hits) if hits else None


def _stop_prefix_tail(text: str, stop: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that is a proper prefix of a stop string."""
    return max((n for s in stop for n in range(1, len(s)) if text.endswith(s[:n])), default=0)


def _trim_to_text(tok, ids: list[int], text: str) -> list[int]:
    """The shortest prefix of ``ids`` whose decoding covers ``text`` (the stop string's tokens dropped after)."""
    for n in range(len(ids) + 1):
        if len(tok.decode(ids[:n], skip_special_tokens=True)) >= len(text):
            return ids[:n]
    return ids
