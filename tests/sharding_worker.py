"""Run in a subprocess by tests/test_batch.py, with 8 emulated CPU devices: sharded batches must equal
unsharded ones. Prints one JSON object."""

import json
import os


os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.analysis.batch import Uniform, batch_simulate, randomize_contexts  # noqa: E402
from jaxsys.examples import BouncingBall, Pendulum  # noqa: E402


def main() -> None:
    out = {"devices": jax.device_count()}
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    p = Pendulum()
    base = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    ctxs = randomize_contexts(
        jax.random.PRNGKey(0), base, 13, parameters={(0, 1): Uniform(0.5, 2.0)}, states={0: Uniform(0.1, 1.5)}
    )  # 13 members over 8 devices: padded to 16 and masked
    save = jnp.array([0.5, 1.0, 2.0])
    for name, integ in [
        ("fixed", js.RungeKutta4Integrator(max_step_size=1e-2)),
        ("error_controlled", js.RungeKutta5Integrator(target_accuracy=1e-9)),
    ]:
        a = batch_simulate(p, ctxs, 2.0, integ, save_at=save)
        b = batch_simulate(p, ctxs, 2.0, integ, save_at=save, mesh=mesh)
        out[name] = {
            "max_diff": float(jnp.max(jnp.abs(a.results().ys - b.results().ys))),
            "sharding": str(b.result.ys.sharding.spec),
            "padded": int(b.result.ys.shape[0]),
            "mean_diff": abs(float(a.mean(lambda r: r.ys[-1, 0])) - float(b.mean(lambda r: r.ys[-1, 0]))),
        }
    # hybrid batch: bouncing balls from different heights (witness events at different times)
    ball = BouncingBall()
    balls = randomize_contexts(jax.random.PRNGKey(1), ball.create_default_context(), 11, states={0: Uniform(2.0, 20.0)})
    integ = js.RungeKutta5Integrator(target_accuracy=1e-9)
    a = batch_simulate(ball, balls, 4.0, integ, save_at=jnp.array([2.0, 4.0]))
    b = batch_simulate(ball, balls, 4.0, integ, save_at=jnp.array([2.0, 4.0]), mesh=mesh)
    out["hybrid"] = {
        "max_diff": float(jnp.max(jnp.abs(a.results().ys - b.results().ys))),
        "impacts": [int(v) for v in b.results().simulator_stats.num_unrestricted_updates],
    }

    # gradient of a batch-mean loss w.r.t. a parameter shared by all members
    def loss(length, mesh):
        c = jax.vmap(lambda c: c.with_numeric_parameter(0, c.get_numeric_parameter(0).at[1].set(length)))(ctxs)
        r = batch_simulate(p, c, 1.0, js.RungeKutta4Integrator(max_step_size=1e-2), mesh=mesh)
        return r.mean(lambda res: res.context.get_continuous_state_vector()[0] ** 2)

    g1 = jax.grad(loss)(1.2, None)
    g8 = jax.grad(loss)(1.2, mesh)
    out["grad"] = {"single": float(g1), "sharded": float(g8)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
