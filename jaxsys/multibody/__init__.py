"""Multibody plants: robots from MuJoCo models (MJCF) as systems of a Diagram, computed by MJX.

``MujocoPlant`` and the rest of `jaxsys.multibody.mujoco_plant` import ``mujoco``; they are loaded
on first access (``jaxsys.MujocoPlant`` or ``jaxsys.multibody.MujocoPlant``), so ``import jaxsys``
works without MuJoCo installed. ``pip install "jaxsys[mujoco]"`` installs MuJoCo and MJX.

Imports (within jaxsys): ``multibody.results`` (eagerly), ``multibody.mujoco_plant`` (on access).
"""

from __future__ import annotations

import importlib
from typing import Any

from .results import BodyPoses as BodyPoses, ContactResults as ContactResults


_LAZY = ("MujocoPlant", "MujocoModelError", "DEFAULT_MODEL_PARAMETERS", "model_path", "state_indices")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.mujoco_plant"), name)
    if name in ("rendering", "mujoco_plant"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'jaxsys.multibody' has no attribute {name!r}")


__all__ = ["BodyPoses", "ContactResults", *_LAZY]
