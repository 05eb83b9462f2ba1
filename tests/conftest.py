"""Test configuration: double precision everywhere (tolerances below assume it)."""

import os
import sys

import jax


jax.config.update("jax_enable_x64", True)

if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    # MuJoCo reads MUJOCO_GL when it is first imported: headless rendering through EGL (as jaxsys
    # chooses itself when it imports mujoco first)
    os.environ.setdefault("MUJOCO_GL", "egl")

import json
import pathlib

import pytest


DATA = pathlib.Path(__file__).parent / "data"


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop compiled code after each test module: the suite compiles thousands of programs, and
    keeping them all (JAX's caches and jaxsys's entry-point caches) grows memory without bound."""
    yield
    from jaxsys.analysis.compile_cache import clear_caches

    clear_caches()  # (jaxsys's caches and JAX's)


def load_drake(name: str) -> dict:
    """Reference data produced by Drake 1.51.1 (see tests/data/README.md)."""
    return json.loads((DATA / f"{name}.json").read_text())


@pytest.fixture(scope="session")
def drake_x4():
    return load_drake("X4")


@pytest.fixture(scope="session")
def drake():
    return load_drake
