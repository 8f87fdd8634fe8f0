"""``verispec serve``: load the models, start the scheduler thread, run uvicorn, drain on a signal.

Shutdown: the first SIGTERM or SIGINT stops admission (new requests and ``/health`` answer
503), lets queued and running requests finish for ``--drain-timeout`` seconds, cancels what is
left (their clients get a 503 error), then stops uvicorn, which waits for the open responses to
be written; the process exits 0. A second signal exits at once.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import threading

import torch
import uvicorn

from ..drafters import make_drafter
from ..engine import SpeculativeDecoder
from ..engine.kpolicy import parse_k
from ..models import load_causal_lm
from .app import ServerInfo, create_app
from .drafting import CappedDrafter
from .metrics import Metrics
from .scheduler import Scheduler

__all__ = ["run_serve", "build", "DrainingServer"]

log = logging.getLogger("verispec.serve")


def build(target: str, draft: str = "default", k: str | int = "auto", *, max_batch: int = 16, max_queue: int = 64,
          verify_budget: int = 0, served_model_name: str | None = None, dtype: str = "float32"
          ) -> tuple[object, Scheduler]:
    """The app and its (started, ready) scheduler for these models."""
    for name, v, lo in (("--max-batch", max_batch, 1), ("--max-queue", max_queue, 0),
                        ("--verify-budget", verify_budget, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    k = parse_k(str(k))  # before loading anything
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    torch_dtype = {"float32": torch.float32, "float64": torch.float64}[dtype]
    lm = load_causal_lm(target, dtype=torch_dtype)
    drafter = make_drafter(draft, target=target, dtype=torch_dtype)
    capped = CappedDrafter(drafter) if drafter is not None else None
    decoder = SpeculativeDecoder(lm, capped, k=k)
    metrics = Metrics()
    sched = Scheduler(decoder, max_batch=max_batch, max_queue=max_queue, verify_budget=verify_budget,
                      metrics=metrics)
    sched.start()
    sched.ready.wait()
    if sched.failed is not None:
        raise sched.failed
    context = getattr(lm.model.config, "max_position_embeddings", None) or 1 << 30
    name = served_model_name or (os.path.basename(os.path.normpath(target)) if os.path.isdir(target) else target)
    info = ServerInfo(sched, metrics, name, copy.deepcopy(lm.tokenizer), lm.vocab_size, int(context),
                      getattr(drafter, "name", "none") if drafter is not None else "none")
    return create_app(info), sched


class DrainingServer(uvicorn.Server):
    """uvicorn, with a first signal that drains the scheduler before the server stops."""

    def __init__(self, config: uvicorn.Config, sched: Scheduler, drain_timeout: float) -> None:
        super().__init__(config)
        self.sched, self.drain_timeout = sched, drain_timeout
        self._draining = False

    def handle_exit(self, sig, frame) -> None:  # noqa: ANN001 - uvicorn's signature
        if self._draining:  # a second signal: now
            self.should_exit = self.force_exit = True
            return
        self._draining = True
        log.info("signal %s: draining (no new requests; up to %.0f s for the running ones)", sig,
                 self.drain_timeout)
        self.sched.drain(self.drain_timeout)
        threading.Thread(target=self._exit_when_drained, name="verispec-drain", daemon=True).start()

    def _exit_when_drained(self) -> None:
        self.sched.join(self.drain_timeout + 10.0)
        self.should_exit = True


def run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    if args.drain_timeout < 0:
        raise ValueError(f"--drain-timeout must be >= 0, got {args.drain_timeout}")
    app, sched = build(args.target, args.draft, args.k, max_batch=args.max_batch, max_queue=args.max_queue,
                       verify_budget=args.verify_budget, served_model_name=args.served_model_name,
                       dtype=args.dtype)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                            lifespan="off", timeout_graceful_shutdown=10)
    server = DrainingServer(config, sched, args.drain_timeout)
    try:
        server.run()
    finally:
        sched.stop()
    log.info("verispec serve stopped")
    return 0
