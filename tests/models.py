"""Small systems shared by the tests."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp

import jaxsys as js


class Decay(js.LeafSystem):
    """x' = -a x (parameter a)."""

    def __init__(self) -> None:
        super().__init__("decay")
        self.declare_continuous_state(1, default=[1.0])
        self.declare_numeric_parameter([1.0])

    def do_calc_time_derivatives(self, context: Any) -> Any:
        return -context.get_numeric_parameter(0)[0] * context.get_continuous_state_vector()


# every integrator that runs in fixed-step mode, and every error-controlled one
FIXED_STEP_INTEGRATORS = [
    js.ExplicitEulerIntegrator,
    js.SemiExplicitEulerIntegrator,
    js.RungeKutta2Integrator,
    js.RungeKutta3Integrator,
    js.BogackiShampine3Integrator,
    js.RungeKutta4Integrator,
    js.RungeKutta5Integrator,
    js.ImplicitEulerIntegrator,
    js.RadauIntegrator,
    js.Radau5Integrator,
]
ADAPTIVE_INTEGRATORS = [
    js.RungeKutta3Integrator,
    js.BogackiShampine3Integrator,
    js.RungeKutta5Integrator,
    js.ImplicitEulerIntegrator,
    js.RadauIntegrator,
    js.Radau5Integrator,
]


class PD(js.LeafSystem):
    """u = -kp x0 - kd x1 (parameters [kp, kd]); direct feedthrough x -> u."""

    def __init__(self, kp: float = 5.0, kd: float = 1.0, name: str = "pd") -> None:
        super().__init__(name)
        self.declare_numeric_parameter([kp, kd])
        self.declare_vector_input_port("x", 2)
        self.declare_vector_output_port("u", 1, self.calc_u)

    def calc_u(self, context):
        x = self.get_input_port(0).eval(context)
        kp, kd = context.get_numeric_parameter(0)
        return jnp.stack([-kp * x[0] - kd * x[1]])


class Everything(js.LeafSystem):
    """A leaf with every kind of state, parameter and port."""

    offset: float = eqx.field(static=True)

    def __init__(self, name: str = "everything") -> None:
        super().__init__(name)
        self.offset = 0.5
        self.declare_continuous_state(2, 1, 1, default=[1.0, 2.0, 3.0, 4.0])
        self.d0 = self.declare_discrete_state(2)
        self.d1 = self.declare_discrete_state([7.0, 8.0, 9.0])
        self.a0 = self.declare_abstract_state({"count": jnp.array(0), "pos": jnp.zeros(2)})
        self.declare_numeric_parameter([2.0, 3.0])
        self.declare_abstract_parameter({"scale": jnp.array(1.5)})
        self.declare_vector_input_port("u", 1)
        self.declare_abstract_input_port("cmd", {"gain": jnp.zeros(())})
        self.declare_vector_output_port("y", 2, self.calc_y)
        self.declare_vector_output_port("free", 1, self.calc_free)
        self.declare_abstract_output_port("info", {"s": jnp.zeros(())}, self.calc_info)
        self.declare_state_output_port("xc", js.ContinuousStateIndex(0))
        self.declare_state_output_port("xd1", self.d1)
        self.declare_state_output_port("xa", self.a0)

    d0: js.DiscreteStateIndex = eqx.field(static=True)
    d1: js.DiscreteStateIndex = eqx.field(static=True)
    a0: js.AbstractStateIndex = eqx.field(static=True)

    def calc_y(self, context):
        u = self.get_input_port("u").eval(context)
        p = context.get_numeric_parameter(0)
        return p * u[0] + self.offset

    def calc_free(self, context):
        return context.get_continuous_state_vector()[:1] * 2.0

    def calc_info(self, context):
        cmd = self.get_input_port("cmd").eval(context)
        return {"s": cmd["gain"] * context.get_abstract_parameter(0)["scale"]}

    def do_calc_time_derivatives(self, context):
        x = context.get_continuous_state_vector()
        p = context.get_numeric_parameter(0)
        u = self.get_input_port(0).eval(context)[0]
        return jnp.array([x[2], -p[0] * x[0], -p[1] * x[1] + u, -x[3]])

    def do_map_velocity_to_qdot(self, context, v):
        # q = [q0, q1], v = [v0]: qdot = [v0, 2 v0]
        return jnp.array([v[0], 2.0 * v[0]])

    def do_map_qdot_to_velocity(self, context, qdot):
        return qdot[:1]
