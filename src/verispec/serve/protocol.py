"""The OpenAI wire format: request validation and response bodies.

Every field a request may carry is checked here, before anything reaches the engine: a bad
value is an :class:`APIError` (HTTP status and OpenAI's ``{"error": {message, type, param,
code}}`` body) naming the field. Unknown fields are ignored, as OpenAI's SDKs send some that
do not apply (``user``, ``logit_bias`` left empty, ...); fields that would change the output in
ways verispec does not implement (``logprobs``, ``echo``, ``best_of`` > 1, ``n`` > 1, ``suffix``,
tools) are refused.

verispec's own fields ride in the body beside OpenAI's (``extra_body`` in the official client):
``top_k``, ``min_p``, ``method`` (``"exact"`` | ``"gumbel"`` | ``"block"``) and ``draft`` (``"none"`` turns
speculation off for this request; the server's drafter name or ``"default"`` keeps it on).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..sampling import SamplingParams
from ..verify import VERIFY_METHODS

__all__ = ["APIError", "CompletionSpec", "parse_request", "error_body", "finish_reason", "completion_body",
           "chat_body", "completion_chunk", "chat_chunk", "usage_body", "MAX_STOP"]

MAX_STOP = 4  # OpenAI's limit on stop strings
ROLES = ("system", "user", "assistant", "developer", "tool")
INT64 = (-(2**63), 2**63 - 1)


class APIError(Exception):
    """An error answered to the client: ``status`` and OpenAI's error object."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass
class CompletionSpec:
    """A validated request, ready for the scheduler (the prompt already tokenised)."""

    chat: bool
    model: str
    prompt_ids: list[int]
    max_tokens: int
    sampling: SamplingParams
    stop: list[str] = field(default_factory=list)
    method: str = "exact"
    draft_off: bool = False
    stream: bool = False
    include_usage: bool = False


def _bad(message: str, param: str | None, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def _number(body: dict, name: str, default: float | None) -> float | None:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _bad(f"'{name}' must be a finite number, got {v!r}", name, "invalid_type")
    return float(v)


def _int(body: dict, name: str, default: int | None) -> int | None:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise _bad(f"'{name}' must be an integer, got {v!r}", name, "invalid_type")
    return v


def _bool(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _bad(f"'{name}' must be a boolean, got {v!r}", name, "invalid_type")
    return v


def parse_request(body: Any, *, chat: bool, model_name: str, tokenizer, vocab_size: int, context: int,
                  drafter_name: str) -> CompletionSpec:
    """Validate an OpenAI (chat) completion request body; the prompt is tokenised with
    ``tokenizer`` (the chat template for ``messages``, as ``verispec generate --chat`` does)."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", None, "invalid_type")
    model = body.get("model", model_name)
    if not isinstance(model, str):
        raise _bad(f"'model' must be a string, got {model!r}", "model", "invalid_type")
    if model != model_name:
        raise APIError(404, f"The model '{model}' does not exist; this server serves '{model_name}'",
                       type="invalid_request_error", param="model", code="model_not_found")
    n = _int(body, "n", 1)
    if n != 1:
        raise _bad(f"'n' must be 1 (one choice per request), got {n}", "n", "unsupported_value")
    for name, ok in (("logprobs", lambda v: v in (None, False, 0)), ("top_logprobs", lambda v: v in (None, 0)),
                     ("echo", lambda v: v in (None, False)), ("best_of", lambda v: v in (None, 1)),
                     ("suffix", lambda v: v in (None, "")), ("tools", lambda v: v in (None, [])),
                     ("response_format", lambda v: v is None or v == {"type": "text"})):
        if not ok(body.get(name)):
            raise _bad(f"'{name}' is not supported by verispec serve", name, "unsupported_value")

    prompt_param = "messages" if chat else "prompt"
    prompt_ids = _chat_ids(body, tokenizer) if chat else _prompt_ids(body, tokenizer, vocab_size)
    if len(prompt_ids) == 0:
        raise _bad(f"'{prompt_param}' is empty", prompt_param)
    if len(prompt_ids) >= context:
        raise _bad(f"the prompt has {len(prompt_ids)} tokens; this model's context is {context} tokens "
                   "(prompt plus at least one generated token)", prompt_param, "context_length_exceeded")

    room = context - len(prompt_ids)
    names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
    given = [nm for nm in names if body.get(nm) is not None]
    max_name = given[0] if given else names[0]
    max_tokens = _int(body, max_name, None)
    if max_tokens is None:
        max_tokens = room if chat else min(16, room)
    if max_tokens < 1:
        raise _bad(f"'{max_name}' must be >= 1, got {max_tokens}", max_name)
    if max_tokens > room:
        raise _bad(f"'{max_name}' = {max_tokens} with a prompt of {len(prompt_ids)} tokens exceeds this model's "
                   f"context of {context} tokens (at most {room})", max_name, "context_length_exceeded")

    temperature = _number(body, "temperature", 1.0)
    if temperature < 0:
        raise _bad(f"'temperature' must be >= 0, got {temperature}", "temperature")
    top_p = _number(body, "top_p", 1.0)
    if not 0 < top_p <= 1:
        raise _bad(f"'top_p' must be in (0, 1], got {top_p}", "top_p")
    top_k = _int(body, "top_k", 0)
    if top_k < 0 and top_k != -1:  # -1: vLLM's "off"
        raise _bad(f"'top_k' must be >= 0 (0 or -1: off), got {top_k}", "top_k")
    min_p = _number(body, "min_p", 0.0)
    if not 0 <= min_p < 1:
        raise _bad(f"'min_p' must be in [0, 1), got {min_p}", "min_p")
    seed = _int(body, "seed", None)
    if seed is not None and not INT64[0] <= seed <= INT64[1]:
        raise _bad(f"'seed' must fit in int64, got {seed}", "seed")
    try:
        sampling = SamplingParams(temperature=temperature, top_k=max(top_k, 0), top_p=top_p, min_p=min_p, seed=seed)
    except (ValueError, TypeError) as e:
        raise _bad(str(e), "temperature") from None

    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or any(not isinstance(s, str) for s in stop):
        raise _bad(f"'stop' must be a string or a list of strings, got {stop!r}", "stop", "invalid_type")
    stop = [s for s in stop if s]
    if len(stop) > MAX_STOP:
        raise _bad(f"'stop' takes at most {MAX_STOP} strings, got {len(stop)}", "stop")

    method = body.get("method", "exact")
    if method not in VERIFY_METHODS:
        raise _bad(f"'method' must be one of {list(VERIFY_METHODS)}, got {method!r}", "method")
    draft = body.get("draft", "default")
    if draft not in ("none", "default", drafter_name):
        raise _bad(f"'draft' must be 'none' (no speculation for this request), 'default' or "
                   f"{drafter_name!r} (this server's drafter), got {draft!r}", "draft")

    stream = _bool(body, "stream", False)
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not isinstance(opts, dict):
            raise _bad("'stream_options' must be an object", "stream_options", "invalid_type")
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        include_usage = _bool(opts, "include_usage", False)
    return CompletionSpec(chat, model, prompt_ids, max_tokens, sampling, stop, method, draft == "none", stream,
                          include_usage)


def _prompt_ids(body: dict, tokenizer, vocab_size: int) -> list[int]:
    p = body.get("prompt")
    if p is None:
        raise _bad("'prompt' is required", "prompt", "missing_required_parameter")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one prompt
    if isinstance(p, str):
        return list(tokenizer(p, add_special_tokens=True)["input_ids"])
    if isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        bad = [t for t in p if not 0 <= t < vocab_size]
        if bad:
            raise _bad(f"'prompt' has token ids outside [0, {vocab_size}): {bad[:5]}", "prompt")
        return list(p)
    if isinstance(p, list) and p and all(isinstance(x, (str, list)) for x in p):
        raise _bad("'prompt' holds several prompts; send one prompt per request", "prompt", "unsupported_value")
    raise _bad("'prompt' must be a string or a list of token ids", "prompt", "invalid_type")


def _chat_ids(body: dict, tokenizer) -> list[int]:
    msgs = body.get("messages")
    if msgs is None:
        raise _bad("'messages' is required", "messages", "missing_required_parameter")
    if not isinstance(msgs, list) or not msgs:
        raise _bad("'messages' must be a non-empty list of {role, content} objects", "messages", "invalid_type")
    clean = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _bad(f"messages[{i}] must be an object with a role in {list(ROLES)}", f"messages[{i}]",
                       "invalid_type")
        content = m.get("content")
        if isinstance(content, list):  # content parts: text only
            if any(not isinstance(c, dict) or c.get("type") != "text" or not isinstance(c.get("text"), str)
                   for c in content):
                raise _bad(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content",
                           "invalid_type")
            content = "".join(c["text"] for c in content)
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be a string", f"messages[{i}].content", "invalid_type")
        clean.append({"role": "system" if m["role"] == "developer" else m["role"], "content": content})
    if not getattr(tokenizer, "chat_template", None):
        raise _bad("this model's tokenizer has no chat template: use /v1/completions", "messages",
                   "unsupported_value")
    ids = tokenizer.apply_chat_template(clean, add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids["input_ids"]) if isinstance(ids, dict) else list(ids)


# -- responses --------------------------------------------------------------------------------

def finish_reason(engine_reason: str) -> str:
    """The engine's "eos" / "stop" / "length" as OpenAI's "stop" / "length"."""
    return "length" if engine_reason == "length" else "stop"


def usage_body(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_body(rid: str, model: str, created: int, text: str, reason: str, usage: dict, stats: dict) -> dict:
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "verispec": stats}],
            "usage": usage}


def chat_body(rid: str, model: str, created: int, text: str, reason: str, usage: dict, stats: dict) -> dict:
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": reason, "verispec": stats}],
            "usage": usage}


def _chunk(kind: str, field: str, rid: str, model: str, created: int, payload: object, reason: str | None,
           stats: dict | None, usage: dict | None) -> dict:
    """One streamed chunk of ``kind`` ("text_completion" or "chat.completion.chunk"): the choice
    carries ``payload`` under ``field`` ("text" or "delta"); no choice when ``payload`` is None
    (a usage-only chunk)."""
    choices = [] if payload is None else [{"index": 0, field: payload, "logprobs": None, "finish_reason": reason}]
    if stats is not None and choices:
        choices[0]["verispec"] = stats
    out = {"id": rid, "object": kind, "created": created, "model": model, "choices": choices}
    if usage is not None:
        out["usage"] = usage
    return out


def completion_chunk(rid: str, model: str, created: int, text: str | None, reason: str | None = None,
                     stats: dict | None = None, usage: dict | None = None) -> dict:
    return _chunk("text_completion", "text", rid, model, created, text, reason, stats, usage)


def chat_chunk(rid: str, model: str, created: int, delta: dict | None, reason: str | None = None,
               stats: dict | None = None, usage: dict | None = None) -> dict:
    return _chunk("chat.completion.chunk", "delta", rid, model, created, delta, reason, stats, usage)


def now() -> int:
    return int(time.time())
