"""Domain randomization with a MuJoCo contact model: a batch of boxes, each with its own mass and
friction coefficient, slides on the ground from 1 m/s until friction stops it (``batch_simulate`` over
randomized model parameters of a discrete ``MujocoPlant``; one compiled, vectorized run).

Coulomb friction stops a sliding block after d = v0² / (2 μ g), whatever its mass: the script prints how
far MuJoCo's (soft-contact) boxes slid against that formula.

Run: python examples/robot_domain_randomization.py [members]   (default 1024; needs
pip install "jaxsys[mujoco]"; writes examples/output/robot_domain_randomization.png)
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxsys as js
from jaxsys.multibody import MujocoPlant, model_path


def main(members: int = 1024) -> None:
    plant = MujocoPlant(model_path("box_on_plane"))  # discrete: MuJoCo's step, every 5 ms
    v0, g = 1.0, 9.81
    base = plant.with_positions(plant.create_default_context(), jnp.array([0.0, 0.0, 0.1, 1.0, 0.0, 0.0, 0.0]))
    base = plant.with_velocities(base, jnp.array([v0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    k_mu, k_mass = jax.random.split(jax.random.PRNGKey(0))
    mu = jax.random.uniform(k_mu, (members,), minval=0.2, maxval=0.7)
    mass = jax.random.uniform(k_mass, (members,), minval=0.5, maxval=3.0)
    box = plant.body_index("box")

    def member(mu_i, mass_i):  # both geoms get μ: MuJoCo combines a pair's frictions by their maximum
        c = plant.with_model_parameter(
            base, "geom_friction", plant.get_model_parameter(base, "geom_friction").at[:, 0].set(mu_i)
        )
        return plant.with_model_parameter(c, "body_mass", plant.get_model_parameter(c, "body_mass").at[box].set(mass_i))

    contexts = jax.vmap(member)(mu, mass)
    start = time.perf_counter()
    batch = js.batch_simulate(plant, contexts, 1.5)
    final = batch.results().context
    x = np.asarray(jax.vmap(plant.get_positions_and_velocities)(final))
    seconds = time.perf_counter() - start
    slid, speed = x[:, 0], np.linalg.norm(x[:, 7:10], axis=1)
    predicted = v0**2 / (2 * np.asarray(mu) * g)
    rel = slid / predicted - 1
    print(f"members {members}, 300 MuJoCo steps each, {seconds:.1f} s (compile included)")
    print(f"all at rest: largest final speed {speed.max():.2e} m/s")
    med, worst = np.median(np.abs(rel)), np.abs(rel).max()
    print(f"sliding distance vs v0^2/(2 mu g): median |error| {med:.3f}, largest {worst:.3f}")
    print(f"correlation of the error with mass {np.corrcoef(rel, np.asarray(mass))[0, 1]:+.3f}")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    sc = ax.scatter(np.asarray(mu), slid, c=np.asarray(mass), s=4, cmap="viridis")
    grid = np.linspace(0.2, 0.7, 100)
    ax.plot(grid, v0**2 / (2 * grid * g), "k-", lw=1, label="Coulomb: v0² / (2 μ g)")
    ax.set_xlabel("friction coefficient μ")
    ax.set_ylabel("sliding distance (m)")
    fig.colorbar(sc, label="box mass (kg)")
    ax.legend()
    ax.set_title(f"{members} randomized boxes (MJX, one batch)")
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / "robot_domain_randomization.png", dpi=100)
    print("wrote examples/output/robot_domain_randomization.png")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
