"""Prometheus metrics of the server (``GET /metrics``), named like vLLM's with a ``verispec:`` prefix.

Each server has a registry of its own (several servers can live in one process, as in tests).
The speculation counters have vLLM's suffixes: ``verispec:spec_decode_num_drafts`` (row-passes
that verified at least one draft token), ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and
``..._num_accepted_tokens_per_pos`` (label ``position``, 0-based draft slot); they are added when
a request finishes, and count only returned tokens (drafts accepted after an EOS or cut by a
stop string are not accepted). Inter-token latency is observed once per token after the first:
a step that emits n tokens for a request ``dt`` seconds after its previous ones observes
``dt / n`` n times.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0,
            10.0, 20.0, 40.0, 80.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """The server's metrics in a registry of their own."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "verispec:"
        self.running = Gauge(p + "num_requests_running", "Requests in the running batch", registry=r)
        self.waiting = Gauge(p + "num_requests_waiting", "Requests queued for admission", registry=r)
        self.batch_size = Histogram(p + "batch_size", "Rows per engine step", buckets=_BATCH, registry=r)
        self.prompt_tokens = Counter(p + "prompt_tokens", "Prompt tokens of admitted requests", registry=r)
        self.generation_tokens = Counter(p + "generation_tokens", "Generated tokens", registry=r)
        self.ttft = Histogram(p + "time_to_first_token_seconds", "Arrival to first token", buckets=_LATENCY,
                              registry=r)
        self.itl = Histogram(p + "inter_token_latency_seconds", "Time per output token after the first",
                             buckets=_LATENCY, registry=r)
        self.e2e = Histogram(p + "e2e_request_latency_seconds", "Arrival to the last token", buckets=_LATENCY,
                             registry=r)
        self.finished = Counter(p + "request_success", "Finished requests", ["finished_reason"], registry=r)
        self.aborted = Counter(p + "request_aborted", "Requests cancelled (client gone, shutdown)", registry=r)
        self.rejected = Counter(p + "request_rejected", "Requests refused before the engine", ["status"],
                                registry=r)
        self.num_drafts = Counter(p + "spec_decode_num_drafts", "Row-passes that verified a draft", registry=r)
        self.num_draft_tokens = Counter(p + "spec_decode_num_draft_tokens", "Draft tokens verified", registry=r)
        self.num_accepted_tokens = Counter(p + "spec_decode_num_accepted_tokens", "Draft tokens accepted",
                                           registry=r)
        self.accepted_per_pos = Counter(p + "spec_decode_num_accepted_tokens_per_pos",
                                        "Draft tokens accepted per draft position", ["position"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
