"""Sampled-data blocks: ZeroOrderHold, DiscreteDerivative, and PID controllers (continuous, and
discrete with a zero-order hold). Drake's systems/primitives and systems/controllers."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import DeclarationError
from ..framework.leaf_system import LeafSystem


def _is_size(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


class ZeroOrderHold(LeafSystem):
    """Samples ``u`` every ``period_sec`` (from ``offset_sec``) and holds it on ``y`` (Drake's
    ``ZeroOrderHold``). ``ZeroOrderHold(period_sec, vector_size)`` holds a vector (discrete state, a
    discrete update); ``ZeroOrderHold(period_sec, abstract_model_value)`` holds any pytree shaped like
    the model (abstract state, an unrestricted update). No direct feedthrough."""

    def __init__(self, period_sec: float, size: Any, offset_sec: float = 0.0, name: str = "") -> None:
        super().__init__(name)
        held: Any
        if _is_size(size):
            held = self.declare_discrete_state(int(size))
            self.declare_vector_input_port("u", int(size))
            self.declare_state_output_port("y", held)
            self.declare_periodic_discrete_update_event(
                period_sec, offset_sec, lambda c, ds: self.get_input_port(0).eval(c)
            )
        else:
            held = self.declare_abstract_state(size)
            self.declare_abstract_input_port("u", size)
            self.declare_state_output_port("y", held)
            self.declare_periodic_unrestricted_update_event(
                period_sec, offset_sec, lambda c, st: st.with_abstract_state(0, self.get_input_port(0).eval(c))
            )


class DiscreteDerivative(LeafSystem):
    """dudt = (u[n] − u[n−1]) / h, sampled every h = ``time_step`` from t = 0 (Drake's
    ``DiscreteDerivative(num_inputs, time_step, suppress_initial_transient=True)``).

    Discrete state: group 0 u[n], group 1 u[n−1] (initially zero), and with
    ``suppress_initial_transient`` group 2 the number of samples taken: the output is zero until two
    samples exist (a start from t = 0 would otherwise see the step from 0 to u[0]). Ports ``u`` and
    ``dudt`` (no direct feedthrough). `set_input_history` sets the past samples (and turns the
    suppression off), as Drake's.
    """

    time_step: float = eqx.field(static=True)
    suppress_initial_transient: bool = eqx.field(static=True)

    def __init__(
        self, num_inputs: int, time_step: float, suppress_initial_transient: bool = True, name: str = ""
    ) -> None:
        super().__init__(name)
        if not time_step > 0:
            raise DeclarationError(f"DiscreteDerivative {name!r}: time_step must be positive; got {time_step}.")
        self.time_step = float(time_step)
        self.suppress_initial_transient = bool(suppress_initial_transient)
        self.declare_discrete_state(num_inputs)  # u[n]
        self.declare_discrete_state(num_inputs)  # u[n-1]
        if self.suppress_initial_transient:
            self.declare_discrete_state(1)  # samples taken
        self.declare_vector_input_port("u", num_inputs)
        self.declare_vector_output_port("dudt", num_inputs, self.calc_dudt, direct_feedthrough=False)
        self.declare_periodic_discrete_update_event(self.time_step, 0.0, self._update)

    def _update(self, context: Context, ds: Any) -> Any:
        return _sample(self, context)

    def calc_dudt(self, context: Context) -> Any:
        """(u[n] − u[n−1]) / h (zero until two samples exist, when suppressing the transient)."""
        return _dudt(self, context)

    def set_input_history(self, context: Context, u_n: Any, u_n_minus_1: Any) -> Context:
        """``context`` with the past samples u[n] and u[n−1] set (and the transient suppression turned
        off), Drake's ``set_input_history``; returns the new context."""
        return _with_history(self, context, u_n, u_n_minus_1)


# the sampling both discrete-derivative blocks share (their state: u[n], u[n-1], samples taken)
def _sample(block: Any, context: Context) -> Any:
    groups = [block.get_input_port(0).eval(context), context.get_discrete_state(0)]
    if block.suppress_initial_transient:
        groups.append(context.get_discrete_state(2) + 1.0)
    return tuple(groups)


def _dudt(block: Any, context: Context) -> Any:
    d = (context.get_discrete_state(0) - context.get_discrete_state(1)) / block.time_step
    if not block.suppress_initial_transient:
        return d
    return jnp.where(context.get_discrete_state(2)[0] >= 2.0, d, 0.0)


def _with_history(block: Any, context: Context, u_n: Any, u_n_minus_1: Any) -> Context:
    ctx = context.with_discrete_state(0, jnp.asarray(u_n)).with_discrete_state(1, jnp.asarray(u_n_minus_1))
    if block.suppress_initial_transient:
        ctx = ctx.with_discrete_state(2, jnp.full((1,), 2.0))
    return ctx


class StateInterpolatorWithDiscreteDerivative(LeafSystem):
    """The state [q, q̇] from a position signal q, q̇ by a [`DiscreteDerivative`][jaxsys.DiscreteDerivative] (Drake's
    ``StateInterpolatorWithDiscreteDerivative(num_positions, time_step, suppress_initial_transient)``,
    there a diagram of a DiscreteDerivative and a Multiplexer; here one leaf with the same state and
    behaviour). Input ``position`` (n), output ``state`` (2n; q passes straight through)."""

    time_step: float = eqx.field(static=True)
    suppress_initial_transient: bool = eqx.field(static=True)

    def __init__(
        self, num_positions: int, time_step: float, suppress_initial_transient: bool = True, name: str = ""
    ) -> None:
        super().__init__(name)
        self.time_step = float(time_step)
        self.suppress_initial_transient = bool(suppress_initial_transient)
        self.declare_discrete_state(num_positions)
        self.declare_discrete_state(num_positions)
        if self.suppress_initial_transient:
            self.declare_discrete_state(1)
        self.declare_vector_input_port("position", num_positions)
        self.declare_vector_output_port("state", 2 * num_positions, self.calc_state)
        self.declare_periodic_discrete_update_event(self.time_step, 0.0, self._update)

    def _update(self, context: Context, ds: Any) -> Any:
        return _sample(self, context)

    def set_input_history(self, context: Context, u_n: Any, u_n_minus_1: Any) -> Context:
        """``context`` with the past position samples q[n] and q[n−1] set (Drake's ``set_input_history``
        of the inner DiscreteDerivative); returns the new context."""
        return _with_history(self, context, u_n, u_n_minus_1)

    def calc_state(self, context: Context) -> Any:
        """[q, (q[n] − q[n−1]) / h]."""
        return jnp.concatenate([self.get_input_port(0).eval(context), _dudt(self, context)])

    def set_initial_position(self, context: Context, position: Any) -> Context:
        """``context`` with the history set so the velocity output is zero at ``position``."""
        return self.set_input_history(context, position, position)

    def set_initial_state(self, context: Context, position: Any, velocity: Any) -> Context:
        """``context`` with the history set so the output is [position, velocity]: u[n] = q,
        u[n−1] = q − h v (Drake's ``set_initial_state``)."""
        q, v = jnp.asarray(position), jnp.asarray(velocity)
        return self.set_input_history(context, q, q - self.time_step * v)


class DiscreteTimeDelay(LeafSystem):
    """Delays its input by ``delay_time_steps`` samples of ``update_sec`` (Drake's
    ``DiscreteTimeDelay``): a buffer of delay_time_steps + 1 samples, shifted at every update (from
    t = 0); the output ``delayed_u`` is the oldest (initially zeros / the model value). A vector
    (``vector_size``, discrete state) or any pytree (``abstract_model_value``, abstract state holding
    the buffer stacked along a leading axis). Input ``u``; no direct feedthrough."""

    buffer: int = eqx.field(static=True)
    is_vector: bool = eqx.field(static=True)

    def __init__(self, update_sec: float, delay_time_steps: int, vector_size_or_model: Any, name: str = "") -> None:
        super().__init__(name)
        if not (_is_size(delay_time_steps) and delay_time_steps >= 0):
            raise DeclarationError(f"DiscreteTimeDelay {name!r}: delay_time_steps must be a nonnegative integer.")
        self.buffer = int(delay_time_steps) + 1
        self.is_vector = _is_size(vector_size_or_model)
        if self.is_vector:
            n = int(vector_size_or_model)
            self.declare_discrete_state(n * self.buffer)
            self.declare_vector_input_port("u", n)
            self.declare_vector_output_port(
                "delayed_u", n, lambda c: c.get_discrete_state(0)[:n], direct_feedthrough=False
            )
            self.declare_periodic_discrete_update_event(update_sec, 0.0, self._shift_vector)
        else:
            import jax

            model = vector_size_or_model
            stacked = jax.tree_util.tree_map(lambda x: jnp.stack([jnp.asarray(x)] * self.buffer), model)
            self.declare_abstract_state(stacked)
            self.declare_abstract_input_port("u", model)
            self.declare_abstract_output_port(
                "delayed_u",
                model,
                lambda c: jax.tree_util.tree_map(lambda b: b[0], c.get_abstract_state(0)),
                direct_feedthrough=False,
            )
            self.declare_periodic_unrestricted_update_event(update_sec, 0.0, self._shift_abstract)

    def _shift_vector(self, context: Context, ds: Any) -> Any:
        u = self.get_input_port(0).eval(context)
        return jnp.concatenate([context.get_discrete_state(0)[u.shape[0] :], u])

    def _shift_abstract(self, context: Context, state: Any) -> Any:
        import jax

        u = self.get_input_port(0).eval(context)
        buf = jax.tree_util.tree_map(
            lambda b, x: jnp.concatenate([b[1:], jnp.asarray(x, b.dtype)[None]]), context.get_abstract_state(0), u
        )
        return state.with_abstract_state(0, buf)


def _gains(kp: Any, ki: Any, kd: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kp, ki, kd = (np.atleast_1d(np.asarray(k, dtype=float)) for k in (kp, ki, kd))
    return tuple(np.broadcast_arrays(kp, ki, kd))  # type: ignore[return-value]


class PidController(LeafSystem):
    """u = kp (q_d − q) + ki ∫(q_d − q) dt + kd (v_d − v) (Drake's ``PidController``).

    Inputs ``estimated_state`` and ``desired_state`` ([q, v], size 2n); output ``control`` (size n).
    Continuous state: the integral of the position error. Numeric parameters 0, 1, 2: kp, ki, kd.
    """

    def __init__(self, kp: Any, ki: Any, kd: Any, name: str = "") -> None:
        super().__init__(name)
        kp, ki, kd = _gains(kp, ki, kd)
        n = kp.shape[0]
        for k in (kp, ki, kd):
            self.declare_numeric_parameter(k)
        self.declare_continuous_state(n)
        self.declare_vector_input_port("estimated_state", 2 * n)
        self.declare_vector_input_port("desired_state", 2 * n)
        self.declare_vector_output_port("control", n, self.calc_control)

    def _errors(self, context: Context) -> tuple[Any, Any]:
        n = self.get_output_port(0).size()
        err = self.get_input_port(1).eval(context) - self.get_input_port(0).eval(context)
        return err[:n], err[n:]

    def calc_control(self, context: Context) -> Any:
        """The PID control."""
        e, edot = self._errors(context)
        kp, ki, kd = (context.get_numeric_parameter(i) for i in range(3))
        return kp * e + ki * context.get_continuous_state_vector() + kd * edot

    def do_calc_time_derivatives(self, context: Context) -> Any:
        return self._errors(context)[0]


class DiscretePidController(LeafSystem):
    """A PID sampled every ``period`` s with a zero-order hold on its output.

    At each sample: e = q_d − q, ė = v_d − v, I += e·period, u = kp e + ki I + kd ė, held until the next
    sample. Ports as [`PidController`][jaxsys.PidController]; discrete state [I, u]; no direct feedthrough.
    """

    period: float = eqx.field(static=True)

    def __init__(self, kp: Any, ki: Any, kd: Any, period: float, name: str = "") -> None:
        super().__init__(name)
        kp, ki, kd = _gains(kp, ki, kd)
        n = kp.shape[0]
        self.period = float(period)
        for k in (kp, ki, kd):
            self.declare_numeric_parameter(k)
        self.declare_discrete_state(2 * n)
        self.declare_vector_input_port("estimated_state", 2 * n)
        self.declare_vector_input_port("desired_state", 2 * n)
        self.declare_vector_output_port("control", n, lambda c: c.get_discrete_state(0)[n:], direct_feedthrough=False)
        self.declare_periodic_discrete_update_event(self.period, 0.0, self._sample)

    def _sample(self, context: Context, ds: Any) -> Any:
        n = self.get_output_port(0).size()
        err = self.get_input_port(1).eval(context) - self.get_input_port(0).eval(context)
        e, edot = err[:n], err[n:]
        kp, ki, kd = (context.get_numeric_parameter(i) for i in range(3))
        integral = context.get_discrete_state(0)[:n] + e * self.period
        return jnp.concatenate([integral, kp * e + ki * integral + kd * edot])


__all__ = [
    "DiscreteDerivative",
    "DiscretePidController",
    "DiscreteTimeDelay",
    "PidController",
    "StateInterpolatorWithDiscreteDerivative",
    "ZeroOrderHold",
]
