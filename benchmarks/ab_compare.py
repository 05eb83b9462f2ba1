"""Before/after timing of jaxsys in one process: the working tree against a git revision.

    python benchmarks/ab_compare.py                 # against HEAD
    python benchmarks/ab_compare.py --base HEAD~3   # against another revision

The package at ``--base`` is extracted (``git archive``) into a temporary directory as
``jaxsys_base`` (jaxsys imports itself relatively, so the copy is independent), both versions build
the same cases of benchmarks/suite.py, and their compiled functions are called alternately (medians
of many calls): the ratio after/before is then free of the machine's drift between runs, which on a
shared 2-core machine is often larger than the change being measured. Issues that touch the loop
ask for every case within 5%.
"""

import argparse
import importlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


jax.config.update("jax_enable_x64", True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_base(rev: str):
    """Import the jaxsys package of git revision ``rev`` as ``jaxsys_base``."""
    tmp = tempfile.mkdtemp(prefix="jaxsys_ab_")
    data = subprocess.run(["git", "archive", rev, "jaxsys"], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp)
    os.rename(os.path.join(tmp, "jaxsys"), os.path.join(tmp, "jaxsys_base"))
    sys.path.insert(0, tmp)
    import jaxsys_base

    return jaxsys_base


def _final(r):
    return r.context.get_continuous_state_vector()


def cases(js):
    """The cases of benchmarks/suite.py (jaxsys rows only), built with package ``js``:
    name -> (jitted function, argument)."""
    ex = importlib.import_module(js.__name__ + ".examples")
    p = ex.Pendulum()
    c = p.get_input_port(0).fix_value(p.create_default_context(), jnp.zeros(1))
    c = c.with_continuous_state(jnp.array([1.0, 0.0]))
    ts = jnp.linspace(0.1, 10, 100)
    rk3 = js.RungeKutta3Integrator(target_accuracy=1e-6)
    dopri = js.RungeKutta5Integrator(target_accuracy=1e-8)
    rk4 = js.RungeKutta4Integrator(max_step_size=1e-3)
    jit = eqx.filter_jit
    out = {
        "S2a RK3 1e-6": (jit(lambda c: _final(js.simulate(p, c, 10.0, rk3))), c),
        "S2b Dormand-Prince 1e-8": (jit(lambda c: _final(js.simulate(p, c, 10.0, dopri))), c),
        "S2b+ 100 saves": (jit(lambda c: js.simulate(p, c, 10.0, dopri, save_at=ts).ys), c),
        "S2b+ 100 saves, dense": (jit(lambda c: js.simulate(p, c, 10.0, dopri, save_at=ts, dense_output=True).ys), c),
        "S2c RK4 fixed, 100 saves": (jit(lambda c: js.simulate(p, c, 10.0, rk4, save_at=ts).ys), c),
    }
    ts5 = jnp.linspace(0.1, 5, 50)

    def loss(c):
        return jnp.sum(js.simulate(p, c, 5.0, rk4, save_at=ts5).ys[:, 0] ** 2)

    out["S7 value_and_grad"] = (jit(jax.value_and_grad(loss)), c)
    rk3_long = js.RungeKutta3Integrator(max_step_size=0.1, target_accuracy=1e-6)
    for tf in (100.0, 500.0):  # ~11,700 and ~58,000 attempts: the adjoint's sweep alone, and re-running

        def long_loss(c, tf=tf):
            return jnp.sum(_final(js.simulate(p, c, tf, rk3_long)) ** 2)

        out[f"S2a-grad RK3 1e-6, {tf:.0f} s, jax.grad"] = (jit(jax.grad(long_loss)), c)
    ball = ex.BouncingBall()
    cb = ball.create_default_context()
    out["S4 bouncing ball"] = (jit(lambda c: _final(js.simulate(ball, c, 5.0, dopri))), cb)
    out["S4 grad through impacts"] = (jit(jax.grad(lambda c: _final(js.simulate(ball, c, 3.0, dopri))[0])), cb)
    cs = jax.vmap(lambda th: c.with_continuous_state(jnp.stack([th, 0.0])))(jnp.linspace(0.1, 1.5, 64))
    out["S6 batch of 64, RK4 fixed"] = (jit(jax.vmap(lambda c: _final(js.simulate(p, c, 10.0, rk4)))), cs)
    out["S6' batch of 64, Dormand-Prince"] = (jit(jax.vmap(lambda c: _final(js.simulate(p, c, 10.0, dopri)))), cs)

    class PD(js.LeafSystem):
        def __init__(self):
            super().__init__("pd")
            self.declare_discrete_state(1)
            self.declare_vector_input_port("x", 2)
            self.declare_vector_output_port("u", 1, lambda ctx: ctx.get_discrete_state_vector())
            self.declare_periodic_discrete_update_event(0.01, 0.0, self.update)

        def update(self, ctx, ds):
            x = self.get_input_port(0).eval(ctx)
            return jnp.stack([-20 * x[0] - 4 * x[1]])

    builder = js.DiagramBuilder()
    plant, pd = builder.add_system(ex.Pendulum()), builder.add_system(PD())
    builder.connect(plant.get_output_port("state"), pd.get_input_port("x"))
    builder.connect(pd.get_output_port("u"), plant.get_input_port("tau"))
    d = builder.build("d")
    cd = d.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
    rk4_10ms = js.RungeKutta4Integrator(max_step_size=0.01)
    out["S5 sampled PD, RK4"] = (jit(lambda c: _final(js.simulate(d, c, 5.0, rk4_10ms))), cd)
    out["S5' sampled PD, RK3 1e-6"] = (jit(lambda c: _final(js.simulate(d, c, 5.0, rk3))), cd)
    # stiff: Van der Pol mu = 1000 on [0, 3000] (S3), one run and a batch of 64 (S3d)
    vdp = ex.VanDerPol(mu=1000.0)
    cv = vdp.create_default_context()
    for label, integ in (
        ("Radau3 1e-6", js.RadauIntegrator(target_accuracy=1e-6)),
        ("Radau5 1e-6", js.Radau5Integrator(target_accuracy=1e-6)),
        ("implicit Euler 1e-4", js.ImplicitEulerIntegrator(target_accuracy=1e-4)),
    ):
        out[f"S3 stiff Van der Pol, {label}"] = (jit(lambda c, i=integ: _final(js.simulate(vdp, c, 3000.0, i))), cv)
    mus = jnp.linspace(100.0, 1000.0, 64)
    cvs = jax.vmap(lambda m: cv.with_numeric_parameter(0, jnp.stack([m])))(mus)
    r5 = js.Radau5Integrator(target_accuracy=1e-6)
    out["S3d batch of 64 stiff Van der Pol, Radau5 1e-6"] = (
        jit(jax.vmap(lambda c: _final(js.simulate(vdp, c, 300.0, r5)))),
        cvs,
    )
    lags = builder_chain(js, 300)
    out["S8 chain of 300 lags"] = (jit(lambda c: _final(js.simulate(lags[0], c, 10.0, lags[2]))), lags[1])
    # (a large carry: three levels of re-running in the adjoint's structure)
    out["S8-grad chain of 300 lags, jax.grad"] = (
        jit(jax.grad(lambda c: jnp.sum(_final(js.simulate(lags[0], c, 10.0, lags[2])) ** 2))),
        lags[1],
    )
    out.update(mujoco_cases(js))
    return out


def mujoco_cases(js):
    """S10 (issue #39) where MuJoCo is installed: the discrete humanoid's 1,000 steps, and the
    continuous MJCF acrobot's 1,000 RK4 steps differentiated with respect to a body mass."""
    try:
        mp = importlib.import_module(js.__name__ + ".multibody.mujoco_plant")
        plant = js.MujocoPlant(mp.model_path("humanoid"))
    except ImportError:
        return {}
    jit = eqx.filter_jit
    u = 0.4 * np.random.default_rng(1).normal(size=plant.num_actuators())
    ctx = plant.get_input_port("actuation").fix_value(plant.create_default_context(), u)
    t_final = 1000 * plant.time_step
    out = {
        "S10 humanoid, 1,000 discrete steps": (
            jit(lambda c: plant.get_positions(js.simulate(plant, c, t_final).context)),
            ctx,
        )
    }
    acro = js.MujocoPlant(mp.model_path("acrobot"), time_step=0.0)
    ca = acro.with_positions(acro.create_default_context(), jnp.array([0.5, -0.3]))
    ca = acro.get_input_port("actuation").fix_value(ca, jnp.array([0.4]))
    rk4 = js.RungeKutta4Integrator(max_step_size=0.001, fixed_step_mode=True)
    mass0 = acro.get_model_parameter(ca, "body_mass")

    def elbow(m2):
        c = acro.with_model_parameter(ca, "body_mass", mass0.at[2].set(m2))
        return acro.get_positions(js.simulate(acro, c, 1.0, rk4).context)[1]

    out["S10-grad acrobot, forward"] = (jax.jit(elbow), jnp.asarray(1.0))
    out["S10-grad acrobot, jax.grad"] = (jax.jit(jax.grad(elbow)), jnp.asarray(1.0))
    out["S10-grad acrobot, jax.jacfwd"] = (jax.jit(jax.jacfwd(elbow)), jnp.asarray(1.0))
    return out


def builder_chain(js, n):
    """S8: a chain of ``n`` first-order lags x_i' = -x_i + x_{i-1} (x_0 = 1), as n subsystems."""
    b = js.DiagramBuilder()
    prev = b.add_named_system("one", js.ConstantVectorSource([1.0])).get_output_port()
    for i in range(n):
        lag = b.add_named_system(f"lag{i}", js.FirstOrderLowPassFilter(1.0, 1))
        b.connect(prev, lag.get_input_port())
        prev = lag.get_output_port()
    d = b.build()
    return d, d.create_default_context(), js.RungeKutta5Integrator(max_step_size=1.0, target_accuracy=1e-6)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="HEAD", help="git revision to compare against (default HEAD)")
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    import jaxsys as new

    old = load_base(args.base)
    A, B = cases(old), cases(new)
    print(f"after = working tree, before = {args.base}; medians of alternating calls\n")
    print("| case | before ms | after ms | after/before | same output |\n|---|---|---|---|---|")
    for k in A:
        if args.only not in k:
            continue
        fa, ca = A[k]
        fb, cb = B[k]
        # (the outputs, gradients included, compared to the last bit: leaves of the two packages' trees)
        la, lb = jax.tree_util.tree_leaves(fa(ca)), jax.tree_util.tree_leaves(fb(cb))
        same = len(la) == len(lb) and all(
            np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True) for x, y in zip(la, lb)
        )
        ta, tb = [], []
        n = args.repeats if "batch" not in k else max(args.repeats // 5, 3)
        for _ in range(n):
            t = time.perf_counter()
            jax.block_until_ready(fa(ca))
            ta.append(time.perf_counter() - t)
            t = time.perf_counter()
            jax.block_until_ready(fb(cb))
            tb.append(time.perf_counter() - t)
        a, b = statistics.median(ta), statistics.median(tb)
        print(f"| {k} | {a * 1e3:.3f} | {b * 1e3:.3f} | {b / a:.3f} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
