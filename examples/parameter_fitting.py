"""Fit a pendulum's length and damping to noisy measurements of its angle from three experiments.

Run: python examples/parameter_fitting.py   (writes examples/output/parameter_fitting.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import Pendulum  # noqa: E402


def main() -> None:
    plant = Pendulum()
    base = plant.get_input_port("tau").fix_value(plant.create_default_context(), [0.0])
    truth = {"length": 1.3, "damping": 0.2}
    spec = {
        "length": js.FitParameter(group=0, element=1, positive=True),
        "damping": js.FitParameter(group=0, element=2, lower=0.0, upper=1.0),
    }
    ts = jnp.linspace(0.1, 5.0, 50)
    angle = lambda c: c.get_continuous_state_vector()[:1]  # noqa: E731 - we only measure the angle
    integrator = js.RungeKutta4Integrator(max_step_size=0.01)

    # synthetic "measurements": the true system, plus noise of 0.01 rad
    experiments, data = [], []
    for i, theta0 in enumerate([0.5, 1.0, 1.5]):
        ctx = base.with_continuous_state(jnp.array([theta0, 0.0]))
        true_ctx = js.optimization.fitting.set_parameters(ctx, spec, truth)
        ys = js.simulate(plant, true_ctx, 5.0, integrator, save_at=ts, record=angle).ys
        data.append(ys + 0.01 * jax.random.normal(jax.random.PRNGKey(i), ys.shape))
        experiments.append(ctx)
    data = jnp.stack(data)

    result = js.fit_parameters(
        plant,
        experiments,
        spec,
        ts,
        data,
        initial={"length": 1.0, "damping": 0.1},
        observe=angle,
        integrator=integrator,
        steps=200,
        print_every=50,
    )
    print(f"fitted length  {result.params['length']:.4f} m   (true {truth['length']})")
    print(f"fitted damping {result.params['damping']:.4f} N m s (true {truth['damping']})")
    print(f"{result.steps} Adam steps in {result.seconds:.1f} s, final loss {result.final_loss:.2e}")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
    dense = jnp.linspace(0.0, 5.0, 251)
    for ctx, ys in zip(experiments, data):
        fitted_ctx = js.optimization.fitting.set_parameters(ctx, spec, result.params)
        fit = js.simulate(plant, fitted_ctx, 5.0, integrator, save_at=dense, record=angle).ys
        (line,) = ax1.plot(dense, fit[:, 0])
        ax1.plot(ts, ys[:, 0], ".", color=line.get_color(), ms=4)
    ax1.set_xlabel("time [s]")
    ax1.set_ylabel("angle [rad]")
    ax1.set_title("measurements (dots) and the fitted model")
    ax2.semilogy(result.loss_history)
    ax2.set_xlabel("Adam step")
    ax2.set_ylabel("loss")
    ax2.set_title("mean squared error")
    fig.tight_layout()
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.savefig(out / "parameter_fitting.png", dpi=100)
    print(f"plot written to {out / 'parameter_fitting.png'}")


if __name__ == "__main__":
    main()
