"""Sampled-data blocks: ZeroOrderHold, DiscreteDerivative, and PID controllers (continuous, and
discrete with a zero-order hold). Drake's systems/primitives and systems/controllers."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.leaf_system import LeafSystem


class ZeroOrderHold(LeafSystem):
    """Samples ``u`` every ``period_sec`` (from ``offset_sec``) and holds it on ``y`` (Drake's
    ``ZeroOrderHold``). The held value is discrete state; no direct feedthrough."""

    def __init__(self, period_sec: float, size: int, offset_sec: float = 0.0, name: str = "") -> None:
        super().__init__(name)
        held = self.declare_discrete_state(size)
        self.declare_vector_input_port("u", size)
        self.declare_state_output_port("y", held)
        self.declare_periodic_discrete_update_event(
            period_sec, offset_sec, lambda c, ds: self.get_input_port(0).eval(c)
        )


class DiscreteDerivative(LeafSystem):
    """dudt = (u[n] − u[n−1]) / h, sampled every h = ``time_step`` (Drake's ``DiscreteDerivative``).

    Discrete state: the last two samples. The output is zero until two samples have been taken
    (Drake's ``suppress_initial_transient``). Ports ``u`` and ``dudt``.
    """

    time_step: float = eqx.field(static=True)

    def __init__(self, size: int, time_step: float, name: str = "") -> None:
        super().__init__(name)
        self.time_step = float(time_step)
        self.declare_discrete_state(2 * size + 1)  # [u[n], u[n-1], samples taken]
        self.declare_vector_input_port("u", size)
        self.declare_vector_output_port("dudt", size, self.calc_dudt, direct_feedthrough=False)
        self.declare_periodic_discrete_update_event(self.time_step, 0.0, self._update)

    def _update(self, context: Context, ds: Any) -> Any:
        x = context.get_discrete_state(0)
        n = self.get_input_port(0).size()
        return jnp.concatenate([self.get_input_port(0).eval(context), x[:n], jnp.minimum(x[2 * n :] + 1, 2.0)])

    def calc_dudt(self, context: Context) -> Any:
        """(u[n] − u[n−1]) / h once two samples exist, else 0."""
        x = context.get_discrete_state(0)
        n = self.get_input_port(0).size()
        return jnp.where(x[2 * n] >= 2, (x[:n] - x[n : 2 * n]) / self.time_step, 0.0)


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
    sample. Ports as :class:`PidController`; discrete state [I, u]; no direct feedthrough.
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


__all__ = ["ZeroOrderHold", "DiscreteDerivative", "PidController", "DiscretePidController"]
