"""Deprecated import path jaxsys.analysis.trajopt: moved to jaxsys.optimization.trajopt.

Importing this module warns (a DeprecationWarning); every name is forwarded.
"""

import importlib as _importlib
import warnings as _warnings


_m0 = _importlib.import_module("jaxsys.optimization.trajopt")


_MODULES = (_m0,)

_warnings.warn(
    "jaxsys.analysis.trajopt moved to jaxsys.optimization.trajopt; "
    "import from there (or from jaxsys). This path will be removed.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):  # noqa: ANN202 - forwards every name, private ones included
    for module in _MODULES:
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
