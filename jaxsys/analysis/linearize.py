"""Deprecated import path: moved to jaxsys.primitives.linearize (linearization) and
jaxsys.controllers.lqr (LQR); every name is forwarded, with a DeprecationWarning when this module is
imported."""

from .._moved import forward


__getattr__ = forward(__name__, "jaxsys.primitives.linearize", "jaxsys.controllers.lqr")
