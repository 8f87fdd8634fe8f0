"""The layers of README's Layout section hold: an import-linter contract (pyproject.toml), checked
on the source tree, and shown to fail on a copy of it where the verifier imports the models."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(pythonpath: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    return subprocess.run([LINT, "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_layers_contract_is_kept():
    out = _lint(ROOT / "src")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verispec layers KEPT" in out.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "src" / "verispec", tmp_path / "verispec",
                    ignore=shutil.ignore_patterns("data", "__pycache__"))
    verify = tmp_path / "verispec" / "verify" / "chain.py"
    verify.write_text(verify.read_text() + "\nfrom .. import models  # an arrow pointing up\n")
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert "verispec layers BROKEN" in out.stdout and "verispec.verify.chain -> verispec.models" in out.stdout
