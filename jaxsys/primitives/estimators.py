"""Deprecated import path jaxsys.primitives.estimators: moved to jaxsys.estimators.kalman.

Importing this module warns (a DeprecationWarning); every name is forwarded.
"""

import importlib as _importlib
import warnings as _warnings


_m0 = _importlib.import_module("jaxsys.estimators.kalman")


_MODULES = (_m0,)

_warnings.warn(
    "jaxsys.primitives.estimators moved to jaxsys.estimators.kalman; "
    "import from there (or from jaxsys). This path will be removed.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):  # noqa: ANN202 - forwards every name, private ones included
    for module in _MODULES:
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
