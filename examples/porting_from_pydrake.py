"""A pydrake script ported to jaxsys: a mass-spring-damper under a sampled PD controller.

The pydrake original is in docs/porting_from_pydrake.md, side by side with this port. What changes:
fields are annotated on the class (systems are equinox Modules), handlers *return* new values
instead of writing into mutable ones, contexts are values (``update_my_context_in_root`` returns a
new root context), and the gradient pydrake would need AutoDiffXd for is ``jax.grad``.

The check: the closed loop is linear with a zero-order hold, so its exact sampled-data solution is a
matrix recursion x_{k+1} = (Ad - Bd K) x_k; the simulation must match it to the integrator's accuracy.

Run: python examples/porting_from_pydrake.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402


M, K_SPRING, C_DAMP = 1.0, 4.0, 0.2  # plant: m x'' = -k x - c x' + u
PERIOD = 0.05  # controller sample period [s]


class MassSpringDamper(js.LeafSystem):
    """x = [position, velocity]; input force u; output the state. Parameters [m, k, c] in the context."""

    def __init__(self) -> None:
        super().__init__("plant")
        self.declare_continuous_state(num_q=1, num_v=1)
        self.declare_numeric_parameter([M, K_SPRING, C_DAMP])
        self.declare_vector_input_port("u", 1)
        self.declare_vector_output_port("x", 2, lambda c: c.get_continuous_state_vector())

    def do_calc_time_derivatives(self, context):  # pydrake: DoCalcTimeDerivatives(context, derivatives)
        m, k, c = context.get_numeric_parameter(0)
        q, v = context.get_continuous_state_vector()
        u = self.get_input_port(0).eval(context)[0]
        return jnp.stack([v, (-k * q - c * v + u) / m])  # returned, not written into `derivatives`


class SampledPD(js.LeafSystem):
    """u = -kp x - kd v, computed every PERIOD and held (the command is discrete state)."""

    def __init__(self, kp: float, kd: float) -> None:
        super().__init__("controller")
        self.declare_numeric_parameter([kp, kd])
        self.declare_vector_input_port("x", 2)
        held = self.declare_discrete_state(1)
        self.declare_periodic_discrete_update_event(PERIOD, 0.0, self.update)
        self.declare_state_output_port("u", held)

    def update(self, context, discrete_state):  # pydrake: writes discrete_state.set_value(...)
        kp, kd = context.get_numeric_parameter(0)
        q, v = self.get_input_port(0).eval(context)
        return jnp.stack([-kp * q - kd * v])  # the new value of group 0


def build(kp: float = 6.0, kd: float = 1.5):
    builder = js.DiagramBuilder()
    plant = builder.add_system(MassSpringDamper())
    ctrl = builder.add_system(SampledPD(kp, kd))
    builder.connect(plant.get_output_port(0), ctrl.get_input_port(0))
    builder.connect(ctrl.get_output_port(0), plant.get_input_port(0))
    builder.export_output(plant.get_output_port(0), "x")
    return builder.build("loop"), plant, ctrl


def exact_sampled(x0: np.ndarray, kp: float, kd: float, n: int) -> np.ndarray:
    """x(n PERIOD) of the sampled-data loop: zero-order-hold discretization, exact."""
    a = np.array([[0.0, 1.0], [-K_SPRING / M, -C_DAMP / M]])
    b = np.array([[0.0], [1.0 / M]])
    big = np.zeros((3, 3))
    big[:2, :2], big[:2, 2:] = a, b
    e = np.asarray(jax.scipy.linalg.expm(jnp.asarray(big * PERIOD)))
    ad, bd = e[:2, :2], e[:2, 2:]
    x = np.array(x0, float)
    for _ in range(n):
        x = ad @ x + bd @ (-np.array([[kp, kd]]) @ x)
    return x


def main() -> None:
    diagram, plant, ctrl = build()
    root = diagram.create_default_context()
    # pydrake: plant.GetMyMutableContextFromRoot(root).SetContinuousState([1, 0]) -- here it returns a new root
    root = plant.update_my_context_in_root(root, lambda c: c.with_continuous_state(jnp.array([1.0, 0.0])))
    integrator = js.RungeKutta5Integrator(max_step_size=0.01, target_accuracy=1e-10)

    t_final = 3.0
    result = js.simulate(diagram, root, t_final, integrator)
    x_final = plant.get_my_context_from_root(result.context).get_continuous_state_vector()
    # the last update happens at 2.95 (Drake does not perform updates due at the final time):
    # 60 samples on [0, 3)
    exact = exact_sampled(np.array([1.0, 0.0]), 6.0, 1.5, round(t_final / PERIOD))
    print(f"final state        {np.asarray(x_final)}")
    print(f"exact sampled-data {exact}")
    print(f"max error {float(np.max(np.abs(np.asarray(x_final) - exact))):.2e}")

    # the gradient pydrake computes with AutoDiffXd: d(final position)/d(kp), a parameter in the context
    def final_position(kp):
        c = ctrl.update_my_context_in_root(root, lambda c: c.with_numeric_parameter(0, jnp.stack([kp, 1.5])))
        out = js.simulate(diagram, c, t_final, integrator).context
        return plant.get_my_context_from_root(out).get_continuous_state_vector()[0]

    g = jax.grad(final_position)(6.0)
    eps = 1e-5
    fd = (final_position(6.0 + eps) - final_position(6.0 - eps)) / (2 * eps)
    print(f"d(final position)/dkp {float(g):.8f} (finite differences {float(fd):.8f})")


if __name__ == "__main__":
    main()
