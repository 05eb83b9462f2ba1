"""Receding-horizon MPC: a pendulum swung up and balanced by iLQR re-solved inside the simulation.

Every 0.05 s a discrete update of the controller runs three iterations of iLQR (``js.ilqr_solve``,
pure JAX) over a 2 s horizon from the measured state, warm-started with its previous plan shifted by
one step, and holds the first input until the next update. The whole closed loop is one
``js.simulate`` of a diagram (plant + controller) with an error-controlled integrator: the MPC is an
ordinary periodic discrete update, compiled once with the rest of the loop.

The costs track a reference passed to the solver as an argument (``reference=``, indexed by the knot
``k``): the controller's input port ``goal`` gives the angle to hold, and the reference over the
horizon is built from it at every solve, so a changed goal needs no recompilation. The goal here is
upright (``GOAL = pi``); a time-varying source on that port makes it a tracking controller.

Prints the final angle error and the largest torque (limit 4 N m), and writes
examples/output/mpc_pendulum.png.
"""

import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib


matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


jax.config.update("jax_enable_x64", True)
import jaxsys as js  # noqa: E402
from jaxsys.examples import Pendulum  # noqa: E402


H, N, U_MAX = 0.05, 40, 4.0  # update period = the model's interval, horizon steps, torque limit


def running_cost(x, u, k, reference):
    # (1 - cos(angle - goal)) measures the angle to the goal without a wrap-around jump; reference[k] is
    # the goal state at knot k of the horizon
    return 2.0 * (1.0 - jnp.cos(x[0] - reference[k, 0])) + 0.05 * x[1] ** 2 + 0.02 * u @ u


def final_cost(x, reference):
    return 50.0 * (1.0 - jnp.cos(x[0] - reference[-1, 0])) + 2.0 * x[1] ** 2


GOAL = jnp.pi  # the angle to hold (rad)


class Mpc(js.LeafSystem):
    """Discrete state: group 0 the plan (N inputs), group 1 the input applied now."""

    model: object = eqx.field(static=True)  # the discrete map of the controller's own plant model

    def __init__(self):
        super().__init__("mpc")
        plant = Pendulum()
        ctx = plant.get_input_port(0).fix_value(plant.create_default_context(), [0.0])
        self.model = js.discrete_dynamics(plant, ctx, H)
        self.declare_vector_input_port("state", 2)
        self.declare_vector_input_port("goal", 1)
        self.declare_discrete_state(N)
        self.declare_discrete_state(1)
        self.declare_periodic_discrete_update_event(H, 0.0, self.solve)
        self.declare_state_output_port("torque", js.DiscreteStateIndex(1))

    def solve(self, context, discrete_state):
        x = self.get_input_port(0).eval(context)
        plan = discrete_state.get_vector(0)
        warm = jnp.concatenate([plan[1:], plan[-1:]])[:, None]  # shift the last plan by one interval
        goal = self.get_input_port(1).eval(context)[0]
        reference = jnp.zeros((N + 1, 2)).at[:, 0].set(goal)  # hold the goal angle at rest, all horizon
        u, _, _ = js.ilqr_solve(
            self.model,
            running_cost,
            final_cost,
            H,
            x,
            warm,
            u_lower=-U_MAX,
            u_upper=U_MAX,
            iterations=4,
            regularization=1.0,
            reference=reference,
        )
        return js.DiscreteValues((u[:, 0], u[0]), discrete_state.system_id)


builder = js.DiagramBuilder()
plant = builder.add_system(Pendulum())
mpc = builder.add_system(Mpc())
builder.connect(plant.get_output_port(0), mpc.get_input_port(0))
goal = builder.add_system(js.ConstantVectorSource([GOAL], name="goal"))
builder.connect(mpc.get_output_port(0), plant.get_input_port(0))
builder.connect(goal.get_output_port(0), mpc.get_input_port(1))
diagram = builder.build()

root = diagram.create_default_context()
root = plant.update_my_context_in_root(root, lambda c: c.with_continuous_state(jnp.array([0.1, 0.0])))
ts = jnp.linspace(0.0, 8.0, 401)


def record(c):
    state = plant.get_my_context_from_root(c).get_continuous_state_vector()
    return jnp.concatenate([state, mpc.get_my_context_from_root(c).get_discrete_state(1)])


integrator = js.RungeKutta3Integrator(max_step_size=0.01, target_accuracy=1e-6)
result = js.simulate(diagram, root, 8.0, integrator, save_at=ts, record=record)
ys = jnp.asarray(result.ys)
theta_end = float(plant.get_my_context_from_root(result.context).get_continuous_state_vector()[0])
error = abs((theta_end - jnp.pi + jnp.pi) % (2 * jnp.pi) - jnp.pi)
print(f"final angle error {float(error):.2e} rad")
print(f"largest torque {float(jnp.max(jnp.abs(ys[:, 2]))):.4f} N m (limit {U_MAX})")
print(f"MPC updates {int(result.simulator_stats.num_discrete_updates)}")

fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
ax1.plot(ts, ys[:, 0], label="angle")
ax1.axhline(float(jnp.pi), color="k", ls=":", label="upright")
ax1.set_ylabel("rad")
ax1.legend()
ax2.step(ts, ys[:, 2], where="post", label="torque (held 0.05 s)")
ax2.axhline(U_MAX, color="r", ls=":")
ax2.axhline(-U_MAX, color="r", ls=":")
ax2.set_xlabel("time [s]")
ax2.set_ylabel("N m")
ax2.legend()
fig.suptitle("iLQR model predictive control inside js.simulate")
out = pathlib.Path(__file__).parent / "output"
out.mkdir(exist_ok=True)
fig.savefig(out / "mpc_pendulum.png", dpi=100)
