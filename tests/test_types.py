"""The package's types are checked (issue #35, item 6): mypy, as configured in pyproject.toml
([tool.mypy]: every module of jaxsys/), reports no error. A change that breaks a signature, reads an
attribute a class does not have, or passes a possibly-None value where a value is required fails here.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_mypy_finds_no_error_in_jaxsys(tmp_path):
    pytest.importorskip("mypy")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout
