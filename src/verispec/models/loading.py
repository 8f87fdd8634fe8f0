"""Loading causal language models: local HF directories, GGUF files and built-in names.

``load_causal_lm`` is the single entry point. It never unpickles (safetensors only), never goes
to the network (``local_files_only=True``), and turns every user-facing failure into a
``ModelLoadError`` that names the argument and the problem. The readers it dispatches to live
beside it (``hf``, ``gguf``, ``builtin``); a model that lands on the CPU then gets the CPU
kernels of ``kernels`` (``apply_cpu_kernels``), a model on any other device keeps HF's modules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from torch import nn

from .builtin import BUILTIN_MODELS, _builtin_dir
from .gguf import _load_gguf
from .hf import ModelLoadError, _has_tokenizer, _load_hf_dir, _load_tokenizer, _load_vocab_map, _quiet
from .kernels import InvariantKernelsUnavailable, apply_cpu_kernels, kernel_choice as _kernel_choice

__all__ = ["CausalLM", "load_causal_lm"]


@dataclass
class CausalLM:
    """A loaded causal LM: model (eval mode, no grad), its tokenizer, and an optional vocab map.

    ``vocab_map`` (int64, shape ``[vocab_size]``) is set for drafts with a reduced output
    vocabulary: output row ``i`` scores target token id ``vocab_map[i]``.
    """

    model: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    name: str
    vocab_map: torch.Tensor | None = None

    @property
    def vocab_size(self) -> int:
        """Rows of the output head (may exceed ``len(tokenizer)`` for padded heads)."""
        return _head_rows(self.model)

    @property
    def eos_token_ids(self) -> set[int]:
        """Every token id that ends generation (generation config, model config, tokenizer)."""
        ids: set[int] = set()
        for src in (self.model.generation_config, self.model.config):
            e = getattr(src, "eos_token_id", None)
            if e is not None:
                ids.update(e if isinstance(e, (list, tuple)) else [e])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids


# ----------------------------------------------------------------------------------------------
# public entry point


def load_causal_lm(
    name_or_path: str | os.PathLike,
    *,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    tokenizer: str | os.PathLike | None = None,
    fast_head: bool = True,
    fast_linears: bool = True,
    fast_attention: bool = True,
    slice_vocab_map: bool = True,
    kernel_choice: str | None = None,
) -> CausalLM:
    """Load a causal LM and its tokenizer.

    Args:
        name_or_path: a built-in name (see ``BUILTIN_MODELS``), a local HF model directory
            (config.json + safetensors weights; pickle checkpoints are refused) or a ``.gguf`` file.
        dtype: floating dtype of the returned weights (checkpoints in other dtypes are cast).
        trust_remote_code: passed to transformers for directories with custom model code.
        tokenizer: load the tokenizer from here instead (a directory, a ``.gguf`` file or a
            built-in name).
        fast_head: CPU models: let the output head run ``(W @ x.T).T`` (see ``fast_lm_head``),
            a numerically equivalent matmul, for the row counts where it is faster.
        fast_linears: float32 on CPU: let the linear layers run a oneDNN-packed weight copy
            (``pack_weight``) for the few-row inputs (up to 16 rows, the head 32) where it is
            faster. Costs one more copy of those weights in memory.
        fast_attention: CPU models on HF's SDPA attention with grouped KV heads: a masked
            multi-token pass (a verify pass) lets SDPA share the KV heads instead of copying
            K and V per query group (``gqa_attention``; bit-identical results), and Llama
            decoder layers run without HF's per-call wrappers (``lean_layers``; bit-identical).
            The three ``fast_*`` kernels are CPU kernels: they are installed only when the
            loaded model lies on the CPU (``apply_cpu_kernels``).
        kernel_choice: the CPU kernels: ``"invariant"`` (the default where it applies: float32,
            the three ``fast_*`` left on, compiled kernels available; a row's logits are the same
            bits whatever its pass width and batch, see ``invariant_kernels``), ``"measured"``
            (``fast_head`` and ``fast_linears`` per row count, timed for this model's shapes on
            this machine at the first load, then read from ``kernels_file()``; see
            ``measured_linears``) or ``"fixed"`` (the choices tuned on one AMD EPYC: packed for
            2-16 rows, the head packed for 1-32 rows and ``(W @ x.T).T`` beyond). Default:
            ``$VERISPEC_KERNEL_CHOICE``, else invariant. Asked for explicitly, ``"invariant"``
            raises ``ModelLoadError`` where it cannot run (not float32, no compiler).
        slice_vocab_map: for a draft with a full output head and a ``vocab_map.safetensors``,
            keep only the mapped rows of the head (what verispec runs). False keeps the full
            head and returns ``vocab_map=None`` (what HF assisted generation needs).

    Raises:
        ModelLoadError: for any problem with the arguments or the files they point to.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ModelLoadError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    try:
        _kernel_choice(kernel_choice)  # checked now; resolved where the kernels go in (the default may give way)
    except ValueError as e:
        raise ModelLoadError(f"kernel_choice (or $VERISPEC_KERNEL_CHOICE): {e}") from None
    name = os.fspath(name_or_path)
    tok_override = _resolve_tokenizer_arg(tokenizer) if tokenizer is not None else None

    if name in BUILTIN_MODELS:
        path = _builtin_dir(name)
        if tok_override is None and name == "smollm2-135m-draft" and not _has_tokenizer(path):
            tok_override = _builtin_dir("smollm2-135m")  # the draft shares the target's tokenizer
    else:
        path = _resolve_path(name, "name_or_path")

    with _quiet():
        if path.is_file():
            model, tok = _load_gguf(path, dtype, load_tokenizer=tok_override is None)
        else:
            model, tok = _load_hf_dir(path, dtype, trust_remote_code,
                                      load_tokenizer=tok_override is None)
        if tok_override is not None:
            tok = _load_tokenizer(tok_override, trust_remote_code, "tokenizer")
    assert tok is not None
    vocab_map = _load_vocab_map(path) if path.is_dir() else None

    _check_vocab(model, tok, vocab_map, name, tokenizer)
    if vocab_map is not None and vocab_map.numel() < _head_rows(model):
        if slice_vocab_map:
            _slice_head(model, vocab_map)
        else:
            vocab_map = None
    _finalize(model, tok, dtype)
    try:
        apply_cpu_kernels(model, head=fast_head, linears=fast_linears, attention=fast_attention, choice=kernel_choice)
    except InvariantKernelsUnavailable as e:
        raise ModelLoadError(f"kernel_choice='invariant' (or $VERISPEC_KERNEL_CHOICE) cannot run here: {e}") from None
    return CausalLM(model=model, tokenizer=tok, name=name, vocab_map=vocab_map)


# ----------------------------------------------------------------------------------------------
# resolving names and paths


def _resolve_path(arg: str, what: str) -> Path:
    path = Path(arg).expanduser()
    if path.exists():
        return path
    looks_like_name = os.sep not in arg and "/" not in arg and not arg.endswith(".gguf") and not arg.startswith(".")
    if looks_like_name:
        raise ModelLoadError(
            f"{what}={arg!r}: unknown model name and no such path. Built-in models: "
            + ", ".join(BUILTIN_MODELS) + ". Otherwise pass a local HF model directory or a .gguf file "
            "(verispec never downloads from a model hub)."
        )
    raise ModelLoadError(f"{what}={arg!r}: path does not exist")


def _resolve_tokenizer_arg(tokenizer: str | os.PathLike) -> Path:
    arg = os.fspath(tokenizer)
    if arg in BUILTIN_MODELS:
        path = _builtin_dir(arg)
        return path if _has_tokenizer(path) else _builtin_dir("smollm2-135m")
    return _resolve_path(arg, "tokenizer")


# ----------------------------------------------------------------------------------------------
# checks and finishing touches


def _head_rows(model: nn.Module) -> int:
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.ndim == 2:
        return int(weight.shape[0])
    return int(model.config.vocab_size)


def _check_vocab(model: transformers.PreTrainedModel, tok: transformers.PreTrainedTokenizerBase,
                 vocab_map: torch.Tensor | None, name: str, tokenizer_arg: object) -> None:
    n_tok = len(tok)
    emb = model.get_input_embeddings()
    n_in = int(getattr(emb, "num_embeddings", model.config.vocab_size))
    src = f"tokenizer={os.fspath(tokenizer_arg)!r}" if tokenizer_arg is not None else "its tokenizer"
    # A reduced-vocabulary draft (vocab_map) may embed only its own tokens: its inputs are its business.
    if vocab_map is None and n_tok > n_in:
        raise ModelLoadError(
            f"{name!r}: {src} has {n_tok} tokens but the model embeds only {n_in}; "
            "tokenizer and model do not match"
        )
    rows = _head_rows(model)
    if vocab_map is None:
        if n_tok > rows:
            raise ModelLoadError(
                f"{name!r}: {src} has {n_tok} tokens but the output head has only {rows} rows; "
                "tokenizer and model do not match (a reduced head needs vocab_map.safetensors)"
            )
        return
    # Either the head is already reduced (one row per vocab_map entry), or it is a full head over
    # the tokenizer's ids and the vocab_map picks the rows the draft uses (sliced at load).
    if vocab_map.numel() != rows and not (vocab_map.numel() < rows and rows >= n_tok):
        raise ModelLoadError(f"{name!r}: vocab_map has {vocab_map.numel()} entries but the output head has {rows} rows")
    if vocab_map.numel() and (int(vocab_map.min()) < 0 or int(vocab_map.max()) >= n_tok):
        raise ModelLoadError(f"{name!r}: vocab_map has token ids outside [0, {n_tok}) of the tokenizer")
    if torch.unique(vocab_map).numel() != vocab_map.numel():
        raise ModelLoadError(f"{name!r}: vocab_map repeats token ids")


def _slice_head(model: transformers.PreTrainedModel, vocab_map: torch.Tensor) -> None:
    """Keep only the ``vocab_map`` rows of a full output head, in place (row i scores token vocab_map[i]).

    A distilled draft ships a full, tied ``V x H`` head so that HF assisted generation can use
    it unchanged; verispec computes only the rows it needs (tokens outside get q = 0, which the
    exact verifier handles). The input embedding keeps every row: inputs stay target ids.
    """
    w = model.get_output_embeddings().weight.detach()[vocab_map].clone()  # [N, H]
    head = nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype, device=w.device)
    head.weight = nn.Parameter(w, requires_grad=False)
    model.config.tie_word_embeddings = False  # the head no longer mirrors the embedding
    model.set_output_embeddings(head)


def _finalize(model: transformers.PreTrainedModel, tok: transformers.PreTrainedTokenizerBase,
              dtype: torch.dtype) -> None:
    if any(p.dtype != dtype for p in model.parameters() if p.is_floating_point()):
        model.to(dtype)
    model.eval()
    model.requires_grad_(False)
    gen = model.generation_config
    if gen.eos_token_id is None:
        gen.eos_token_id = model.config.eos_token_id if model.config.eos_token_id is not None else tok.eos_token_id
    if gen.pad_token_id is None:
        eos = gen.eos_token_id
        gen.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else (
            eos[0] if isinstance(eos, list) and eos else eos)
