"""Systems from plain functions in one line (Drake's ``VectorSystem``, the functional way)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.leaf_system import LeafSystem


class FunctionSystem(LeafSystem):
    """A system from ``f(t, x, u, p) -> xdot`` and ``g(t, x, u, p) -> y``.

    **Arguments:**
    - `f`: the time derivatives (None for a stateless system).
    - `g`: the output (None: the output is the state).
    - `num_states`, `num_inputs`, `num_outputs`: sizes (``num_outputs`` defaults to ``num_states``
      when ``g`` is None).
    - `params`: default numeric parameter vector ``p`` (numeric parameter 0).
    - `x0`: default state.

    Ports ``u0`` (if ``num_inputs``) and ``y0`` (if ``num_outputs``). Direct feedthrough of ``g`` is
    found by tracing it. ``u`` is an empty vector when there is no input.
    """

    f: Callable[..., Any] | None = eqx.field(static=True)
    g: Callable[..., Any] | None = eqx.field(static=True)

    def __init__(
        self,
        f: Callable[..., Any] | None,
        g: Callable[..., Any] | None = None,
        num_states: int = 0,
        num_inputs: int = 0,
        num_outputs: int | None = None,
        params: Any = (),
        x0: Any = None,
        name: str = "",
    ) -> None:
        super().__init__(name)
        self.f, self.g = f, g
        if num_states:
            self.declare_continuous_state(num_states, default=x0)
        self.declare_numeric_parameter(
            np.atleast_1d(np.asarray(params, dtype=float)) if np.size(params) else np.zeros(0)
        )
        if num_inputs:
            self.declare_vector_input_port("u0", num_inputs)
        n_out = num_states if (num_outputs is None and g is None) else (num_outputs or 0)
        if n_out:
            self.declare_vector_output_port("y0", n_out, self._output)

    def _args(self, context: Context) -> tuple[Any, Any, Any, Any]:
        u = self.get_input_port(0).eval(context) if self.num_input_ports() else jnp.zeros((0,), context.time.dtype)
        return context.get_time(), context.get_continuous_state_vector(), u, context.get_numeric_parameter(0)

    def _output(self, context: Context) -> Any:
        if self.g is None:
            return context.get_continuous_state_vector()
        return self.g(*self._args(context))

    def do_calc_time_derivatives(self, context: Context) -> Any:
        if self.f is None:
            return jnp.zeros((0,), context.time.dtype)
        return self.f(*self._args(context))


VectorSystem = FunctionSystem
