"""Shared fixtures: tiny float64 models that build offline in well under a second."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from verispec.testing import tiny_llama

# The tests run tiny models whose ops take microseconds: one intra-op thread avoids OpenMP
# hand-off costs (and keeps a loaded 2-core machine from thrashing). Tests that check thread
# counts set their own.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_target():
    """A 2-layer random llama (V=64, float64) used as the target in engine tests."""
    return tiny_llama(vocab_size=64, seed=0, dtype=torch.float64)


@pytest.fixture(scope="session")
def tiny_draft():
    """A different 1-layer random llama sharing the target's tokenizer."""
    return tiny_llama(vocab_size=64, seed=1, layers=1, dtype=torch.float64)


@pytest.fixture(autouse=True, scope="session")
def _costs_file(tmp_path_factory):
    """Pass costs measured by the tests go to a file of their own, not the user's cache."""
    import os

    path = tmp_path_factory.mktemp("costs") / "pass-costs.json"
    old = os.environ.get("VERISPEC_COSTS")
    os.environ["VERISPEC_COSTS"] = str(path)
    yield path
    if old is None:
        os.environ.pop("VERISPEC_COSTS", None)
    else:
        os.environ["VERISPEC_COSTS"] = old


@pytest.fixture(autouse=True, scope="session")
def _kernels_file(tmp_path_factory):
    """Kernel choices measured by the tests go to a file of their own, not the user's cache;
    they are measured by default (unset $VERISPEC_KERNEL_CHOICE)."""
    import os

    path = tmp_path_factory.mktemp("kernels") / "cpu-kernels.json"
    old = {k: os.environ.get(k) for k in ("VERISPEC_KERNELS", "VERISPEC_KERNEL_CHOICE")}
    os.environ["VERISPEC_KERNELS"] = str(path)
    os.environ.pop("VERISPEC_KERNEL_CHOICE", None)
    yield path
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture()
def torch_without_device():
    """``(fake, missing)``: a stand-in for the torch module whose tensor factories record in
    ``missing`` each call made without ``device=``. Patched into a module, it checks that every
    tensor the module builds follows its inputs' device (no GPU here to catch a stray CPU tensor)."""
    import types

    missing: list[str] = []

    def checked(name):
        real = getattr(torch, name)

        def factory(*args, **kwargs):
            if "device" not in kwargs:
                missing.append(name)
            return real(*args, **kwargs)
        return factory

    fake = types.SimpleNamespace(**{n: getattr(torch, n) for n in dir(torch) if not n.startswith("__")})
    for name in ("arange", "tensor", "as_tensor", "zeros", "ones", "full", "empty", "rand", "randint", "eye",
                 "linspace"):
        setattr(fake, name, checked(name))
    return fake, missing


@pytest.fixture
def trees_always(monkeypatch):
    """"tree" rows draft a tree every pass (the warm-up never ends): for tests of what trees
    do, not of when the policy prefers them."""
    import verispec.engine.kpolicy as kpolicy

    monkeypatch.setattr(kpolicy, "MODE_WARMUP", 10**9)


@pytest.fixture
def load_script():
    """``load_script(name)``: the module ``scripts/<name>.py`` (scripts are not a package)."""
    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load
