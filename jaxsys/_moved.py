"""The old import paths of moved modules: each forwards every name to the new module(s) and warns
(a DeprecationWarning) when it is imported. ``import jaxsys`` imports none of them.

Imports: nothing from jaxsys at import time (the new modules are imported by name when an old path is).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def forward(old: str, *new: str) -> Callable[[str], Any]:
    """Warn that module ``old`` moved to ``new`` and return the module ``__getattr__`` that forwards
    every name (private ones included) to the new modules, in order."""
    modules = [importlib.import_module(name) for name in new]
    warnings.warn(
        f"{old} moved to {' and '.join(new)}; import from there (or from jaxsys). This path will be removed.",
        DeprecationWarning,
        stacklevel=3,
    )

    def getattr_(name: str) -> Any:
        for module in modules:
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return getattr_
