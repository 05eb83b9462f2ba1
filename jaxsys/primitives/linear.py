"""Integrator, LinearSystem and AffineSystem (Drake's systems/primitives).

The matrices are an abstract parameter of the context (a dict of arrays), so ``jax.grad`` can
differentiate a simulation with respect to them. With ``time_period > 0`` the system is discrete:
x[n+1] = A x[n] + B u[n] + f0 every ``time_period`` seconds (a periodic discrete update from t = 0).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import DeclarationError
from ..framework.leaf_system import LeafSystem


class Integrator(LeafSystem):
    """ẋ = u, y = x (Drake's ``Integrator(size)``). Ports ``u0`` and ``y0``."""

    def __init__(self, size: int, name: str = "") -> None:
        super().__init__(name)
        self.declare_continuous_state(size)
        self.declare_vector_input_port("u0", size)
        self.declare_vector_output_port("y0", size, lambda c: c.get_continuous_state_vector())

    def do_calc_time_derivatives(self, context: Context) -> Any:
        return self.get_input_port(0).eval(context)


def _mat(m: Any, rows: int | None, cols: int | None, what: str) -> np.ndarray:
    a = np.asarray(m, dtype=float)
    if a.size == 0:
        return np.zeros((rows or 0, cols or 0))
    a = np.atleast_2d(a)
    if (rows is not None and a.shape[0] != rows) or (cols is not None and a.shape[1] != cols):
        raise DeclarationError(f"{what} has shape {a.shape}; expected ({rows}, {cols}).")
    return a


class AffineSystem(LeafSystem):
    """ẋ = A x + B u + f0, y = C x + D u + y0 (Drake's ``AffineSystem``); discrete when ``time_period > 0``.

    Abstract parameter 0: ``{"A", "B", "f0", "C", "D", "y0"}``. Ports ``u0`` (if B has columns) and
    ``y0`` (if C has rows). Output feedthrough is declared from whether D is nonzero, as in Drake.
    """

    time_period: float = eqx.field(static=True)

    def __init__(
        self,
        A: Any,
        B: Any = (),
        f0: Any = (),
        C: Any = (),
        D: Any = (),
        y0: Any = (),
        time_period: float = 0.0,
        name: str = "",
    ) -> None:
        super().__init__(name)
        A = np.atleast_2d(np.asarray(A, dtype=float)) if np.size(A) else np.zeros((0, 0))
        n = A.shape[0]
        if A.shape != (n, n):
            raise DeclarationError(f"AffineSystem {name!r}: A must be square; got {A.shape}.")
        m_from_D = np.atleast_2d(np.asarray(D, dtype=float)).shape[1] if np.size(D) else 0
        B = _mat(B, n, None, f"AffineSystem {name!r}: B") if np.size(B) else np.zeros((n, m_from_D))
        m = B.shape[1]
        p_from_D = np.atleast_2d(np.asarray(D, dtype=float)).shape[0] if np.size(D) else 0
        C = _mat(C, None, n, f"AffineSystem {name!r}: C") if np.size(C) else np.zeros((p_from_D, n))
        p = C.shape[0]
        D = _mat(D, p, m, f"AffineSystem {name!r}: D") if np.size(D) else np.zeros((p, m))
        f0 = np.zeros(n) if not np.size(f0) else np.asarray(f0, dtype=float).reshape(n)
        y0 = np.zeros(p) if not np.size(y0) else np.asarray(y0, dtype=float).reshape(p)
        self.time_period = float(time_period)
        self.declare_abstract_parameter({k: jnp.asarray(v) for k, v in dict(A=A, B=B, f0=f0, C=C, D=D, y0=y0).items()})
        if self.time_period > 0:
            self.declare_discrete_state(n)
            self.declare_periodic_discrete_update_event(self.time_period, 0.0, self._update)
        else:
            self.declare_continuous_state(n)
        if m:
            self.declare_vector_input_port("u0", m)
        if p:
            self.declare_vector_output_port("y0", p, self.calc_y, direct_feedthrough=bool(np.any(D)) and m > 0)

    def _x(self, context: Context) -> Any:
        return context.get_discrete_state(0) if self.time_period > 0 else context.get_continuous_state_vector()

    def _u(self, context: Context, M: Any) -> Any:
        if self.num_input_ports() == 0:
            return jnp.zeros((M["B"].shape[1],), context.time.dtype)
        return self.get_input_port(0).eval(context)

    def calc_y(self, context: Context) -> Any:
        """C x + D u + y0."""
        M = context.get_abstract_parameter(0)
        y = M["C"] @ self._x(context) + M["y0"]
        if self.num_input_ports() and self.get_direct_feedthroughs():
            y = y + M["D"] @ self._u(context, M)
        return y

    def _next(self, context: Context) -> Any:
        M = context.get_abstract_parameter(0)
        return M["A"] @ self._x(context) + M["B"] @ self._u(context, M) + M["f0"]

    def _update(self, context: Context, discrete_state: Any) -> Any:
        return self._next(context)

    def do_calc_time_derivatives(self, context: Context) -> Any:
        if self.time_period > 0:
            return jnp.zeros((0,), context.time.dtype)
        return self._next(context)

    def A(self, context: Context) -> Any:  # noqa: N802 - Drake's name
        """The A matrix in ``context`` (Drake: ``A()``)."""
        return context.get_abstract_parameter(0)["A"]

    def B(self, context: Context) -> Any:  # noqa: N802
        """The B matrix in ``context``."""
        return context.get_abstract_parameter(0)["B"]

    def C(self, context: Context) -> Any:  # noqa: N802
        """The C matrix in ``context``."""
        return context.get_abstract_parameter(0)["C"]

    def D(self, context: Context) -> Any:  # noqa: N802
        """The D matrix in ``context``."""
        return context.get_abstract_parameter(0)["D"]


class LinearSystem(AffineSystem):
    """ẋ = A x + B u, y = C x + D u (Drake's ``LinearSystem``); discrete when ``time_period > 0``."""

    def __init__(self, A: Any, B: Any = (), C: Any = (), D: Any = (), time_period: float = 0.0, name: str = "") -> None:
        super().__init__(A, B, (), C, D, (), time_period, name)
