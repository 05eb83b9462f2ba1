"""The package layout mirrors Drake's folders and imports flow one way (issue #35, item 7).

framework (systems/framework) <- trajectories (common/trajectories) and analysis (the loop, the
Simulator, integrators: systems/analysis) <- primitives (systems/primitives, with Linearize) <-
controllers (systems/controllers: LQR, iLQR) <- estimators (systems/estimators); optimization
(planning/, solvers/: trajectory optimization, NLP, fitting) on analysis; multibody and ecs on top.
The old import paths still work, with a DeprecationWarning.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import sys
import warnings

import pytest

import jaxsys as js


ROOT = pathlib.Path(js.__file__).parent
LAYER = {
    "framework": 0,
    "trajectories": 1,
    "analysis": 1,
    "primitives": 2,
    "examples": 2,
    "plotting": 2,
    "controllers": 3,
    "optimization": 3,
    "estimators": 4,
    "multibody": 5,
    "ecs": 5,
}
# the old import paths: modules that only forward to the new ones (and warn)
MOVED = {
    "jaxsys.analysis.linearize": ("jaxsys.primitives.linearize", "linearize"),
    "jaxsys.analysis.ilqr": ("jaxsys.controllers.ilqr", "ilqr"),
    "jaxsys.analysis.trajopt": ("jaxsys.optimization.trajopt", "direct_collocation"),
    "jaxsys.analysis.nlp": ("jaxsys.optimization.nlp", "solve_nlp"),
    "jaxsys.analysis.fitting": ("jaxsys.optimization.fitting", "fit_parameters"),
    "jaxsys.primitives.controllers": ("jaxsys.controllers.lqr", "finite_horizon_linear_quadratic_regulator"),
    "jaxsys.primitives.estimators": ("jaxsys.estimators.kalman", "ExtendedKalmanFilter"),
}


def _package_imports() -> set[tuple[str, str, str]]:
    """(importing package, imported package, file) for every relative import between jaxsys's packages,
    function-level ones included (the forwarding modules left out)."""
    shims = {m.removeprefix("jaxsys.").replace(".", "/") + ".py" for m in MOVED}
    edges = set()
    for f in ROOT.rglob("*.py"):
        rel = f.relative_to(ROOT)
        if str(rel) in shims or len(rel.parts) == 1 and rel.name == "__init__.py":
            continue
        here = rel.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(rel.parent.parts)[: len(rel.parent.parts) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [a.name for a in node.names][:1])
                there = target[0].removesuffix(".py") if target else here
                if there != here:
                    edges.add((here, there, str(rel)))
    return edges


def test_imports_flow_one_way_between_packages():
    edges = _package_imports()
    assert {h for h, _, _ in edges} | {t for _, t, _ in edges} <= set(LAYER)
    upward = [(h, t, f) for h, t, f in edges if LAYER[t] >= LAYER[h]]
    assert not upward, f"imports against the layering: {upward}"
    # what the issue names: the loop never imports the block library, the controllers or the workflows
    assert not [e for e in edges if e[0] == "analysis"] or {t for h, t, _ in edges if h == "analysis"} == {"framework"}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_import_paths_forward_with_a_deprecation(old):
    new, name = MOVED[old]
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_moved_block_names_forward_from_primitives():
    with pytest.warns(DeprecationWarning, match="jaxsys.estimators"):
        ekf = js.primitives.ExtendedKalmanFilter
    assert ekf is js.ExtendedKalmanFilter is js.estimators.ExtendedKalmanFilter
    assert js.primitives.PiecewisePolynomial is js.trajectories.PiecewisePolynomial is js.PiecewisePolynomial


def test_import_jaxsys_imports_no_forwarding_module():
    code = (
        "import sys, warnings; warnings.simplefilter('error', DeprecationWarning); import jaxsys; "
        f"assert not [m for m in {sorted(MOVED)!r} if m in sys.modules]"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_import_hides_inside_a_function():
    # every import between jaxsys's modules is at module level (or for type checking only): no import
    # cycle is dodged by importing late. The one exception is documented: `import jaxsys` never imports
    # mujoco, so `jaxsys.MujocoPlant` loads its module on first access.
    late = []
    for f in ROOT.rglob("*.py"):
        tree = ast.parse(f.read_text())

        def visit(node: ast.AST, in_function: bool, type_checking: bool, f: pathlib.Path = f) -> None:
            for child in ast.iter_child_nodes(node):
                fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                tc = type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
                if isinstance(child, ast.ImportFrom) and child.level and fn and not tc:
                    late.append(f"{f.relative_to(ROOT)}:{child.lineno} {ast.unparse(child)}")
                visit(child, fn, tc)

        visit(tree, False, False)
    assert len(late) == 1 and late[0].startswith("__init__.py:"), late
    assert late[0].endswith("from .multibody.mujoco_plant import MujocoPlant"), late
