"""Swing the cart-pole up from hanging to upright with limited force, by direct collocation; then
simulate the optimized input forward with the simulator. Draws a strip of animation frames.

Run: python examples/trajectory_optimization.py   (writes examples/output/trajectory_optimization.png)
"""

from __future__ import annotations

import pathlib

import jax
import numpy as np


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import CartPole  # noqa: E402


def cart_pole():
    plant = CartPole()
    return plant, plant.get_input_port("force").fix_value(plant.create_default_context(), [0.0])


def draw_strip(ax, xs, length: float = 0.5, frames: int = 9) -> None:
    """Cart-pole poses at evenly spaced knots, drawn side by side (a frame strip)."""
    from matplotlib.patches import Rectangle

    idx = np.linspace(0, len(xs) - 1, frames).astype(int)
    for j, k in enumerate(idx):
        x, th = xs[k, 0], xs[k, 1]
        off = 1.6 * j  # draw each frame shifted right
        cx = off + x
        ax.plot([off - 0.6, off + 0.6], [0, 0], color="0.8", lw=1)
        ax.add_patch(Rectangle((cx - 0.2, -0.1), 0.4, 0.2, color="C0"))
        px, py = cx + length * np.sin(th), -length * np.cos(th)
        ax.plot([cx, px], [0, py], color="C3", lw=2)
        ax.plot(px, py, "o", color="C3")
    ax.set_aspect("equal")
    ax.axis("off")


def main() -> None:
    goal = np.array([0.0, np.pi, 0.0, 0.0])
    plant, ctx = cart_pole()
    result = js.direct_collocation(plant, ctx, 3.0, 50, lambda x, u: u @ u, x_final=goal, u_limit=20.0)
    print(
        f"collocation: cost {result.cost:.3f}, constraint violation {result.constraint_violation:.1e}, "
        f"{result.iterations} SQP iterations, max |f| = {np.abs(result.u).max():.2f} N"
    )
    fresh, fresh_ctx = cart_pole()
    xs_coll = js.simulate_open_loop(fresh, fresh_ctx, result)
    # Hermite-Simpson's small model error grows near the unstable top: polish the collocation solution by
    # multiple shooting (the simulator's own RK4), started from it, so the open-loop replay is exact
    polished = js.direct_shooting(
        plant,
        ctx,
        3.0,
        50,
        lambda x, u: u @ u,
        x_final=goal,
        u_limit=20.0,
        num_segments=10,
        u_init=result.u,
        x_init=result.x,
    )
    print(f"multiple shooting from it: cost {polished.cost:.3f}, {polished.iterations} SQP iterations")
    xs = js.simulate_open_loop(fresh, fresh_ctx, polished, substeps=4)
    print("collocation input replayed, final state - goal:", np.round(xs_coll[-1] - goal, 4))
    print("simulated final state - goal:", np.round(xs[-1] - goal, 4))

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig = plt.figure(figsize=(11, 6))
    ax1 = fig.add_subplot(2, 2, 1)
    ax1.plot(result.times, result.x[:, 1], label="collocation")
    ax1.plot(result.times, xs_coll[:, 1], ":", label="collocation input replayed")
    ax1.plot(polished.times, xs[:, 1], "--", label="polished input replayed")
    ax1.axhline(np.pi, color="gray", lw=0.8)
    ax1.set_title("pole angle [rad]")
    ax1.legend()
    ax2 = fig.add_subplot(2, 2, 2)
    ax2.plot(result.times, result.u[:, 0], color="C2", label="collocation")
    ax2.plot(polished.times, polished.u[:, 0], "--", color="C3", label="polished")
    ax2.legend()
    ax2.axhline(20, color="gray", lw=0.8, ls="--")
    ax2.axhline(-20, color="gray", lw=0.8, ls="--")
    ax2.set_title("force [N] (limit 20 N)")
    ax3 = fig.add_subplot(2, 1, 2)
    draw_strip(ax3, xs)
    ax3.set_title("frames at t = 0 ... 3 s")
    fig.tight_layout()
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    fig.savefig(out / "trajectory_optimization.png", dpi=100)
    print(f"plot written to {out / 'trajectory_optimization.png'}")


if __name__ == "__main__":
    main()
