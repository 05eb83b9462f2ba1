"""Deprecated import path jaxsys.analysis.linearize: moved to jaxsys.primitives.linearize (linearization) and
jaxsys.controllers.lqr (LQR, Riccati equations).

Importing this module warns (a DeprecationWarning); every name is forwarded.
"""

import importlib as _importlib
import warnings as _warnings


_m1 = _importlib.import_module("jaxsys.controllers.lqr")
_m0 = _importlib.import_module("jaxsys.primitives.linearize")


_MODULES = (
    _m0,
    _m1,
)

_warnings.warn(
    "jaxsys.analysis.linearize moved to jaxsys.primitives.linearize and jaxsys.controllers.lqr; "
    "import from there (or from jaxsys). This path will be removed.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):  # noqa: ANN202 - forwards every name, private ones included
    for module in _MODULES:
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
