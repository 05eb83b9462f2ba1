"""The documentation site builds with ``mkdocs build --strict`` (broken links, missing pages or bad
API references fail), and every public name of ``jaxsys.__all__`` is on an API reference page."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

import jaxsys


ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_public_name_is_in_the_api_reference():
    text = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    # at jaxsys.NAME, or at its module's path for names jaxsys loads lazily (jaxsys.multibody...MujocoPlant)
    listed = set(re.findall(r"^::: jaxsys\.(?:[\w.]*\.)?(\w+)\s*$", text, flags=re.M))
    missing = sorted(set(jaxsys.__all__) - listed)
    assert not missing, f"public names missing from docs/api (run python docs/gen_api_pages.py): {missing}"


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    site = tmp_path / "site"
    # the rendered notebooks carry their plots, and the API pages their entries
    nb = (site / "notebooks" / "03_trajectory_optimization" / "index.html").read_text()
    assert nb.count("data:image/png;base64") >= 3
    api = (site / "api" / "primitives" / "index.html").read_text()
    assert "ExtendedKalmanFilter" in api and "BarycentricMeshSystem" in api
