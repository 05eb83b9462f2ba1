"""Hundreds of particles in an entity-component world: a controller in PreUpdate holds the particles
that have a thrust gain at a target height, physics in Update applies gravity and ground contact,
a boundary system removes particles that leave the box, and a logger in PostUpdate records.

Run: python examples/ecs_particles.py   (writes examples/output/ecs_particles.png)
"""

from __future__ import annotations

import pathlib
from typing import ClassVar

import jax
import jax.numpy as jnp


jax.config.update("jax_enable_x64", True)

from jaxsys import ecs  # noqa: E402


TARGET = 2.0


class Controller(ecs.EcsSystem):
    """PreUpdate: a PD thrust toward the target height, for particles with a gain."""

    priority: ClassVar[int] = ecs.PRE_PHYSICS_PRIORITY
    requires: ClassVar[tuple[str, ...]] = ("pos", "vel", "gain", "force")

    def pre_update(self, info: ecs.UpdateInfo, world: ecs.World) -> ecs.World:
        def thrust(p, v, k, f):
            return jnp.stack([0.0, 9.81 + k * (TARGET - p[1]) - 2.0 * jnp.sqrt(k) * v[1]])

        return world.apply(["pos", "vel", "gain", "force"], thrust, outputs=["force"])


class Physics(ecs.EcsSystem):
    """Update: gravity, forces, and an inelastic ground (restitution 0.5), semi-implicit Euler."""

    priority: ClassVar[int] = ecs.PHYSICS_PRIORITY
    requires: ClassVar[tuple[str, ...]] = ("pos", "vel", "force")

    def update(self, info: ecs.UpdateInfo, world: ecs.World) -> ecs.World:
        dt = info.dt

        def step(p, v, f):
            v = v + dt * (f + jnp.array([0.0, -9.81]))
            p = p + dt * v
            hit = p[1] < 0.0
            return jnp.where(hit, p * jnp.array([1.0, 0.0]), p), jnp.where(hit, v * jnp.array([1.0, -0.5]), v)

        return world.apply(["pos", "vel", "force"], step, outputs=["pos", "vel"])


class Boundary(ecs.EcsSystem):
    """Update: particles outside |x| <= 5 are removed at the end of the step."""

    def update(self, info: ecs.UpdateInfo, world: ecs.World) -> ecs.World:
        out = world.each(["pos"]) & (jnp.abs(world.column("pos")[:, 0]) > 5.0)
        return world.request_remove_where(out)


class Logger(ecs.EcsSystem):
    """PostUpdate (read-only): mean heights of both groups and the number of particles."""

    def post_update(self, info: ecs.UpdateInfo, view: ecs.WorldView):
        z = view.column("pos")[:, 1]
        controlled = view.each(["gain"])
        free = view.each(["pos"]) & ~controlled
        mean = lambda m: jnp.sum(jnp.where(m, z, 0.0)) / jnp.maximum(jnp.sum(m), 1)  # noqa: E731
        return {"time": info.sim_time, "controlled": mean(controlled), "free": mean(free), "count": view.count(["pos"])}


def make_world(n: int = 300, seed: int = 0) -> ecs.World:
    world = ecs.World.empty(
        512, {"pos": jnp.zeros(2), "vel": jnp.zeros(2), "force": jnp.zeros(2), "gain": jnp.zeros(())}
    )
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    pos = jnp.stack(
        [
            jax.random.uniform(keys[0], (n,), minval=-4, maxval=4),
            jax.random.uniform(keys[1], (n,), minval=0.5, maxval=5),
        ],
        1,
    )
    vel = jnp.stack([jax.random.normal(keys[2], (n,)) * 0.8, jnp.zeros(n)], 1)
    for i in range(n):
        world, e = world.create_entity()
        world = world.create_component(e, "pos", pos[i]).create_component(e, "vel", vel[i])
        world = world.create_component(e, "force", jnp.zeros(2))
        if i % 2 == 0:  # every other particle is controlled
            world = world.create_component(e, "gain", 20.0)
    return world.end_of_step()


def main() -> None:
    systems = [Logger(), Boundary(), Physics(), Controller()]  # the runner orders them by priority
    world = make_world()
    run = jax.jit(lambda w: ecs.run(w, systems, 2000, step_size=0.005))
    final, info, (log,) = run(world)
    left = int(log["count"][-1])
    print(f"after {int(info.iterations)} steps ({float(info.sim_time):.1f} s): {left} of 300 particles left")
    print(f"controlled particles' mean height {float(log['controlled'][-1]):.4f} m (target {TARGET})")
    print(f"free particles' mean height {float(log['free'][-1]):.4f} m (resting on the ground)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 3.5))
    ax1.plot(log["time"], log["controlled"], label="controlled")
    ax1.plot(log["time"], log["free"], label="free")
    ax1.axhline(TARGET, color="gray", ls="--", lw=0.8)
    ax1.set_xlabel("time [s]")
    ax1.set_title("mean height [m]")
    ax1.legend()
    ax2.plot(log["time"], log["count"])
    ax2.set_xlabel("time [s]")
    ax2.set_title("particles in the box")
    p = final.column("pos")
    alive = final.each(["pos"])
    ctl = final.each(["gain"])
    ax3.scatter(p[alive & ctl, 0], p[alive & ctl, 1], s=6, label="controlled")
    ax3.scatter(p[alive & ~ctl, 0], p[alive & ~ctl, 1], s=6, label="free")
    ax3.set_xlim(-5, 5)
    ax3.set_title("final positions")
    ax3.legend(fontsize="small")
    fig.tight_layout()
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.savefig(out / "ecs_particles.png", dpi=100)
    print(f"plot written to {out / 'ecs_particles.png'}")


if __name__ == "__main__":
    main()
