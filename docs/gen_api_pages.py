"""Writes docs/api/*.md: one mkdocstrings entry per name of ``jaxsys.__all__``, grouped by area.

Run after adding public names: python docs/gen_api_pages.py (tests/test_docs.py checks that every
public name is on some API page)."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import types

import jaxsys


PAGES = {
    "framework": ("Systems, contexts, ports and diagrams", ("jaxsys.framework",)),
    "simulation": (
        "Simulation, integrators and batches",
        (
            "jaxsys.analysis.simulate",
            "jaxsys.analysis.simulator",
            "jaxsys.analysis.results",
            "jaxsys.analysis.integrators",
            "jaxsys.analysis.progress",
            "jaxsys.analysis.event_loop",
            "jaxsys.analysis.batch",
            "jaxsys.analysis.monte_carlo",
        ),
    ),
    "analysis": (
        "Linearization, control design, optimization and fitting",
        (
            "jaxsys.primitives.linearize",
            "jaxsys.controllers",
            "jaxsys.estimators",
            "jaxsys.optimization",
        ),
    ),
    "primitives": ("The block library", ("jaxsys.primitives", "jaxsys.trajectories")),
    "robots": ("Robots: MuJoCo plants", ("jaxsys.multibody",)),
    "plotting": ("Plotting", ("jaxsys.plotting",)),
}
INTRO = {
    "framework": "Drake's System / LeafSystem / Diagram / Context family. Contexts are values: every "
    "`with_*` returns a new one.",
    "simulation": "`simulate`, the `Simulator`, the integrators, and batched runs.",
    "analysis": "Linearization and LQR, trajectory optimization, iLQR and parameter fitting.",
    "primitives": "Drake's primitives, controllers and estimators (see the "
    "[mapping](../api_mapping.md#drakes-block-library-jaxsys)).",
    "robots": "`MujocoPlant`: MuJoCo models (MJCF) as plants of a Diagram, computed by MJX (needs "
    '`pip install "jaxsys[mujoco]"`); pictures in `jaxsys.multibody.rendering`.',
    "plotting": "Plots of results, logs and diagrams (matplotlib).",
}


SUBPACKAGES = {
    "ecs": (
        "The entity-component world (jaxsys.ecs)",
        "gz-sim's entity-component world as pure functions over pytrees: the `World`, its systems "
        "(`EcsSystem`) run in PreUpdate / Update / PostUpdate phases by `run` / `step`, and the bridge "
        "`DiagramPhysics` that makes a jaxsys plant the physics. The narrative is on the "
        "[entity-component world](../ecs.md) page.",
    ),
    "examples": (
        "Example plants (jaxsys.examples)",
        "Importable plants: each a LeafSystem with numeric parameters, named ports, energies where "
        "physical, and its equations in the docstring.",
    ),
}

LAZY = ("MujocoPlant",)
# helpers that live in a subpackage only (not in jaxsys.__all__)
EXTRA = {
    "robots": [
        "## Models, errors and pictures",
        "",
        "::: jaxsys.multibody.mujoco_plant.model_path",
        "",
        "::: jaxsys.multibody.mujoco_plant.MujocoModelError",
        "",
        "::: jaxsys.multibody.mujoco_plant.DEFAULT_MODEL_PARAMETERS",
        "",
        "::: jaxsys.multibody.rendering.render_frames",
        "",
        "::: jaxsys.multibody.rendering.save_animation",
        "",
        "::: jaxsys.multibody.rendering.plot_joint_trajectories",
        "",
        "::: jaxsys.multibody.rendering.RenderingUnavailable",
        "",
    ]
}


def module_of(name: str) -> str:
    obj = getattr(jaxsys, name)
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    mod = getattr(obj, "__module__", None) or ""
    if not mod.startswith("jaxsys") or isinstance(obj, (dict, tuple, list, int, float, str)):
        mod = {"STATUS_MESSAGES": "jaxsys.analysis.results", "ALL_INTEGRATORS": "jaxsys.analysis.integrators"}.get(
            name, "jaxsys.analysis.results"
        )
    return mod


def main() -> None:
    out = pathlib.Path(__file__).parent / "api"
    out.mkdir(exist_ok=True)
    groups: dict[str, list[str]] = {k: [] for k in PAGES}
    modules = []
    for name in jaxsys.__all__:
        obj = getattr(jaxsys, name)
        if isinstance(obj, types.ModuleType):
            modules.append(name)
            continue
        mod = module_of(name)
        page = next((k for k, (_, prefixes) in PAGES.items() if mod.startswith(prefixes)), "simulation")
        groups[page].append(name)
    for page, (title, _) in PAGES.items():
        lines = [f"# {title}", "", INTRO[page], ""]
        for name in sorted(groups[page], key=lambda n: (not inspect.isclass(getattr(jaxsys, n)), n.lower())):
            # names loaded lazily by jaxsys.__getattr__ (MujocoPlant) are documented at their module's path:
            # mkdocstrings reads modules statically and cannot follow the lazy attribute
            path = f"{module_of(name)}.{name}" if name in LAZY else f"jaxsys.{name}"
            lines += [f"::: {path}", ""]
        lines += EXTRA.get(page, [])
        (out / f"{page}.md").write_text("\n".join(lines))
    # the subpackages with public names of their own: a page each, every name of their __all__
    for page, (title, intro) in SUBPACKAGES.items():
        module = importlib.import_module(f"jaxsys.{page}")
        lines = [f"# {title}", "", intro, ""]
        for name in sorted(module.__all__, key=lambda n: (not inspect.isclass(getattr(module, n)), n.lower())):
            lines += [f"::: jaxsys.{page}.{name}", ""]
        (out / f"{page}.md").write_text("\n".join(lines))
    lines = ["# Modules", "", "The subpackages re-exported by `jaxsys` (`js.ecs`, `js.examples`, ...).", ""]
    for name in sorted(modules):
        lines += [f"## `jaxsys.{name}`", "", f"::: jaxsys.{name}", "    options:", "      show_root_heading: false", ""]
    (out / "modules.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
