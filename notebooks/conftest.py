"""The two longest notebooks run with the slow checks (``pytest -m slow``, which CI runs after the
default run, as the README's test command does): 09_robots (~58 s: MJX compiles, rendering, 512
contact rollouts) and 03_trajectory_optimization (~35 s: four SciPy-driven solves). The others run in
the default ``pytest``."""

from __future__ import annotations

import pytest


SLOW_NOTEBOOKS = {"09_robots.ipynb", "03_trajectory_optimization.ipynb"}


@pytest.hookimpl(tryfirst=True)  # (before pytest's own hook deselects by ``-m``)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SLOW_NOTEBOOKS:
            item.add_marker(pytest.mark.slow)
