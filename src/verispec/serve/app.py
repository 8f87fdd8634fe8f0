"""The HTTP side: FastAPI routes, OpenAI-style errors and server-sent events.

Handlers validate a request (:mod:`.protocol`), queue it on the scheduler and wait on an asyncio
queue that the scheduler thread fills through ``loop.call_soon_threadsafe``. A client that goes
away (a closed stream, or a dropped connection while waiting for a whole answer) cancels its
request: the scheduler frees its row at the next step.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .metrics import CONTENT_TYPE, Metrics
from .protocol import (
    APIError,
    chat_body,
    chat_chunk,
    completion_body,
    completion_chunk,
    error_body,
    finish_reason,
    now,
    parse_request,
    usage_body,
)
from .scheduler import Job, Scheduler

__all__ = ["ServerInfo", "create_app"]

_POLL = 0.25  # seconds between disconnect checks while a non-streamed request runs


@dataclass
class ServerInfo:
    """What the routes need: the scheduler, the served model's name and limits, a tokenizer."""

    scheduler: Scheduler
    metrics: Metrics
    model_name: str
    tokenizer: object  # the front end's own copy (the scheduler thread decodes with the engine's)
    vocab_size: int
    context: int
    drafter_name: str


def _error(status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
           code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, type, param, code), status_code=status)


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def create_app(info: ServerInfo) -> FastAPI:
    app = FastAPI(title="verispec serve", docs_url=None, redoc_url=None, openapi_url=None)
    sched, metrics = info.scheduler, info.metrics
    created = now()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        return _error(exc.status_code, str(exc.detail), param=None, code=code)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        return _error(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error")

    @app.get("/health")
    async def health() -> JSONResponse:
        if not sched.admitting:
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [
            {"id": info.model_name, "object": "model", "created": created, "owned_by": "verispec",
             "max_model_len": info.context, "draft": info.drafter_name}]})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _complete(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _complete(request, chat=True)

    async def _complete(request: Request, chat: bool) -> Response:
        if not sched.admitting:
            metrics.rejected.labels(status="503").inc()
            return _error(503, "the server is shutting down", type="service_unavailable", code="shutting_down")
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            metrics.rejected.labels(status="400").inc()
            return _error(400, f"the request body is not valid JSON: {e}", code="invalid_json")
        try:
            spec = parse_request(body, chat=chat, model_name=info.model_name, tokenizer=info.tokenizer,
                                 vocab_size=info.vocab_size, context=info.context, drafter_name=info.drafter_name)
        except APIError as e:
            metrics.rejected.labels(status=str(e.status)).inc()
            return JSONResponse(e.body(), status_code=e.status)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        job = Job(rid, spec, emit=lambda ev: loop.call_soon_threadsafe(queue.put_nowait, ev))
        status = sched.submit(job)
        if status == "full":
            metrics.rejected.labels(status="429").inc()
            return _error(429, f"the server's queue is full ({sched.max_queue} waiting); retry later",
                          type="rate_limit_error", code="queue_full")
        if status == "closed":
            metrics.rejected.labels(status="503").inc()
            return _error(503, "the server is shutting down", type="service_unavailable", code="shutting_down")
        if spec.stream:
            return StreamingResponse(_stream(rid, spec, queue, chat), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Request-Id": rid})
        return await _whole(request, rid, spec, queue, chat)

    async def _whole(request: Request, rid: str, spec, queue: asyncio.Queue, chat: bool) -> Response:
        done = False
        getter = asyncio.ensure_future(queue.get())
        try:
            while True:
                finished, _ = await asyncio.wait({getter}, timeout=_POLL)
                if not finished:
                    if await request.is_disconnected():
                        return Response(status_code=499)
                    continue
                ev = getter.result()
                if ev[0] == "delta":
                    getter = asyncio.ensure_future(queue.get())
                    continue
                done = True
                if ev[0] == "error":
                    _, status, message = ev
                    kind = "service_unavailable" if status == 503 else "server_error" if status >= 500 else \
                        "invalid_request_error"
                    return _error(status, message, type=kind)
                _, completion, stats = ev
                usage = usage_body(len(spec.prompt_ids), len(completion.token_ids))
                make = chat_body if chat else completion_body
                return JSONResponse(make(rid, spec.model, now(), completion.text,
                                         finish_reason(completion.finish_reason), usage, stats),
                                    headers={"X-Request-Id": rid})
        finally:
            if not getter.done():
                getter.cancel()
            if not done:
                sched.cancel(rid)

    async def _stream(rid: str, spec, queue: asyncio.Queue, chat: bool):
        done = False
        t = now()
        try:
            if chat:
                yield _sse(chat_chunk(rid, spec.model, t, {"role": "assistant", "content": ""}))
            while True:
                ev = await queue.get()
                if ev[0] == "delta":
                    yield _sse(chat_chunk(rid, spec.model, t, {"content": ev[1]}) if chat
                               else completion_chunk(rid, spec.model, t, ev[1]))
                    continue
                done = True
                if ev[0] == "error":
                    _, status, message = ev
                    yield _sse(error_body(message, "service_unavailable" if status == 503 else "server_error",
                                          None, str(status)))
                else:
                    _, completion, stats = ev
                    reason = finish_reason(completion.finish_reason)
                    yield _sse(chat_chunk(rid, spec.model, t, {}, reason, stats) if chat
                               else completion_chunk(rid, spec.model, t, "", reason, stats))
                    if spec.include_usage:
                        usage = usage_body(len(spec.prompt_ids), len(completion.token_ids))
                        yield _sse(chat_chunk(rid, spec.model, t, None, usage=usage) if chat
                                   else completion_chunk(rid, spec.model, t, None, usage=usage))
                yield "data: [DONE]\n\n"
                return
        finally:
            if not done:
                sched.cancel(rid)

    return app
