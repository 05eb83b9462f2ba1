"""Deprecated import path: moved to jaxsys.controllers.ilqr; every name is forwarded, with a
DeprecationWarning when this module is imported."""

from .._moved import forward


__getattr__ = forward(__name__, "jaxsys.controllers.ilqr")
