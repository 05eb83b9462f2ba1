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


@pytest.mark.parametrize("sub", ["ecs", "examples"])
def test_every_name_of_the_subpackages_has_an_api_entry(sub):
    # (issue #41 item 1: jaxsys.ecs and jaxsys.examples had one sentence each on the Modules page)
    module = __import__(f"jaxsys.{sub}", fromlist=["__all__"])
    text = (ROOT / "docs" / "api" / f"{sub}.md").read_text()
    listed = set(re.findall(rf"^::: jaxsys\.{sub}\.(\w+)\s*$", text, flags=re.M))
    missing = sorted(set(module.__all__) - listed)
    assert not missing, (
        f"names of jaxsys.{sub} missing from docs/api/{sub}.md (run python docs/gen_api_pages.py): {missing}"
    )
    public = {n for n in dir(module) if not n.startswith("_") and not isinstance(getattr(module, n), type(re))}
    assert public <= set(module.__all__) | {"annotations"}, sorted(public - set(module.__all__))


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
    # docstrings are Markdown: no reStructuredText role shows as literal text, and cross-references to
    # public names are links (issue #41 item 2)
    role = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc):`")
    literal = [str(p.relative_to(site)) for p in site.rglob("*.html") if role.search(p.read_text())]
    assert not literal, f"pages with literal Sphinx roles: {literal}"
    sim = (site / "api" / "simulation" / "index.html").read_text()
    assert 'href="#jaxsys.simulate"' in sim or 'href="./#jaxsys.simulate"' in sim or "#jaxsys.simulate" in sim


def test_docstrings_use_no_restructuredtext_roles():
    role = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc):`")
    found = [
        f"{p.relative_to(ROOT)}:{i + 1}"
        for p in (ROOT / "jaxsys").rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines())
        if role.search(line)
    ]
    assert not found, f"reStructuredText roles (mkdocstrings renders Markdown; use [`name`][jaxsys.name]): {found}"
