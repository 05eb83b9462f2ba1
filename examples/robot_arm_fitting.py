"""Fit the link masses and joint damping of an MJCF robot arm (a MuJoCo model simulated by MJX) to
noisy joint-angle measurements, by Gauss-Newton, and check the truth lies within the fit's standard
errors.

The arm is ``jaxsys/multibody/models/planar_arm.xml`` (three links in a vertical plane, a motor per
joint). Three experiments apply different constant motor torques from different starting angles; the
"measurements" are the true model's joint angles plus 2 mrad of noise.

Run: python examples/robot_arm_fitting.py   (needs pip install "jaxsys[mujoco]"; writes
examples/output/robot_arm_fitting.png)
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.multibody import MujocoPlant, model_path  # noqa: E402


def main() -> None:
    plant = MujocoPlant(model_path("planar_arm"), time_step=0.0)  # continuous: q, v from mjx.forward
    base = plant.create_default_context()
    links, joints = ("upper", "fore", "hand"), plant.joint_names()
    spec = {f"mass_{b}": plant.fit_parameter(base, "body_mass", plant.body_index(b), positive=True) for b in links}
    spec.update({f"damping_{j}": plant.fit_parameter(base, "dof_damping", i, lower=0.0) for i, j in enumerate(joints)})
    nominal = {k: float(base.get_numeric_parameter(p.group)[p.element]) for k, p in spec.items()}
    truth = {k: v * f for (k, v), f in zip(nominal.items(), (1.15, 0.9, 1.2, 1.3, 0.8, 1.25))}

    ts = jnp.linspace(0.02, 1.0, 50)
    angles = lambda c: plant.get_positions(c)  # noqa: E731 - what the encoders measure
    integrator = js.RungeKutta4Integrator(max_step_size=0.005, fixed_step_mode=True)
    experiments, data = [], []
    setups = [
        ([0.4, -0.3, 0.2], [3.0, 1.0, 0.2]),
        ([-0.6, 0.5, 0.0], [-2.0, 0.5, -0.3]),
        ([0.1, 0.8, -0.6], [0.0, -1.5, 0.4]),
    ]
    for i, (q0, tau) in enumerate(setups):
        ctx = plant.get_input_port("actuation").fix_value(plant.with_positions(base, jnp.array(q0)), jnp.array(tau))
        true_ctx = js.set_parameters(ctx, spec, truth)
        ys = js.simulate(plant, true_ctx, 1.0, integrator, save_at=ts, record=angles).ys
        data.append(ys + 0.002 * jax.random.normal(jax.random.PRNGKey(i), ys.shape))
        experiments.append(ctx)
    data = jnp.stack(data)

    result = js.fit_parameters(
        plant, experiments, spec, ts, data, observe=angles, integrator=integrator, method="gauss_newton", steps=12
    )
    print(f"{'parameter':18s} {'nominal':>9s} {'truth':>9s} {'fitted':>9s} {'std err':>9s} {'|err|/se':>8s}")
    worst = 0.0
    for k in spec:
        est, se = float(result.params[k]), float(result.standard_errors[k])
        z = abs(est - truth[k]) / se
        worst = max(worst, z)
        print(f"{k:18s} {nominal[k]:9.4f} {truth[k]:9.4f} {est:9.4f} {se:9.4f} {z:8.2f}")
    print(f"largest error in standard errors {worst:.2f}")
    print(f"final loss {result.final_loss:.3e} after {result.steps} Gauss-Newton steps ({result.seconds:.1f} s)")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fitted_ctx = js.set_parameters(experiments[0], spec, result.params)
    fit = js.simulate(plant, fitted_ctx, 1.0, integrator, save_at=ts, record=angles).ys
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for j, name in enumerate(joints):
        ax.plot(ts, data[0, :, j], ".", ms=3, label=f"{name} measured")
        ax.plot(ts, fit[:, j], "-", lw=1, color=ax.lines[-1].get_color())
    ax.set_xlabel("time (s)")
    ax.set_ylabel("joint angle (rad)")
    ax.set_title("planar arm (MJCF, MJX): measured angles and the fitted model")
    ax.legend(fontsize="small", ncol=3)
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / "robot_arm_fitting.png", dpi=100)
    print("wrote examples/output/robot_arm_fitting.png")


if __name__ == "__main__":
    main()
