"""Test configuration: double precision everywhere (tolerances below assume it)."""

import os
import sys


# One BLAS thread per process: the suite runs two workers on two cores, and each notebook kernel and
# example script is a further process (they inherit this). OpenBLAS threads that spin while the other
# core is busy slow SciPy's SLSQP loops several-fold under the parallel run (notebook 03 next to the
# event-gradient tests: 228 s with two BLAS threads, 37 s with one; alone, 37 s either way). Set here,
# before the workers start, unless the caller chose otherwise.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import gc  # noqa: E402

import jax  # noqa: E402


jax.config.update("jax_enable_x64", True)

# Python's cyclic garbage collector at its default thresholds runs thousands of collections in a
# module of simulation tests (tracing makes many short-lived objects while many long-lived ones stay):
# 11 s of tests/test_event_timing.py's 169 s in one process. Far rarer collections, and a full one
# after each module (below): that module 169 -> 156 s, tests/test_mujoco_plant.py 82.6 -> 72.6 s with
# the same peak memory (1.78 / 1.76 GB), tests/test_event_status.py + test_events.py 36.8-38.7 ->
# 34.3-35.8 s. For the test processes only: jaxsys leaves the collector of its users alone.
gc.set_threshold(100_000, 50, 1_000)

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
    gc.collect()


@pytest.fixture(params=["jacobian", "adjoint"])
def reverse_by(request, monkeypatch):
    """Each of the two ways jaxsys's loops are differentiated in reverse mode (jaxsys.analysis.adjoint):
    by their Jacobian (one forward run carrying a tangent per input: loops differentiated in few
    scalars) and by the discrete adjoint (a backward sweep from checkpoints: the others). "adjoint"
    forces the sweep whatever the number of inputs. Compiled code is dropped around the forced run
    (JAX caches the derivatives of programs it has traced)."""
    from jaxsys.analysis import adjoint
    from jaxsys.analysis.compile_cache import clear_caches

    if request.param == "adjoint":
        monkeypatch.setattr(adjoint, "JACOBIAN_INPUTS", (0,) * len(adjoint.JACOBIAN_INPUTS))
        monkeypatch.setattr(adjoint, "JACOBIAN_INPUTS_BETWEEN_SAVES", (0,) * len(adjoint.JACOBIAN_INPUTS))
        clear_caches()
    yield request.param
    if request.param == "adjoint":
        clear_caches()


def load_drake(name: str) -> dict:
    """Reference data produced by Drake 1.51.1 (see tests/data/README.md)."""
    return json.loads((DATA / f"{name}.json").read_text())


@pytest.fixture(scope="session")
def drake_x4():
    return load_drake("X4")


@pytest.fixture(scope="session")
def drake():
    return load_drake
