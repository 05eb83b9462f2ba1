"""GPU benchmark (issue #40 item 4): the batched rows in one command, a table for RESULTS.md.

    python benchmarks/gpu.py              # full sizes (meant for a GPU)
    python benchmarks/gpu.py --quick      # small sizes: checks the script on a CPU in a minute or two
    python benchmarks/gpu.py --write      # also writes the "gpu table" block of benchmarks/RESULTS.md
    python benchmarks/gpu.py --x64        # float64 (default float32, what GPU batches usually run)
    python benchmarks/gpu.py --only stiff,mujoco   # some cases: fixed, error, stiff, mujoco

Rows (each a ratio against the first row of its case, measured side by side in this process):
- batches of 1k / 10k / 100k pendulums, fixed-step RK4 (h = 1e-3, 10 s): ``batch_simulate`` against a
  hand-written ``jit(vmap(fori_loop(rk4)))`` (the floor);
- the same batches error-controlled, at equal final error: ``batch_simulate`` with RK5 at 1e-3 against
  Diffrax's ``jit(vmap(diffeqsolve(Dopri5)))`` at the loosest tolerance as accurate;
- the stiff batch (1,024 Van der Pol, mu ~ U[100, 1000], Radau5; to t = 300 with --x64, else t = 30)
  against Diffrax's vmap(Kvaerno5) at equal final error (suite.py's S3d);
- the MuJoCo rollouts (1,024 and 10,000 randomized boxes with contacts, 300 steps) against a raw
  ``jit(vmap(scan(mjx.step)))`` (suite.py's S10-batch), where mujoco-mjx is installed.

A compile time of 0.00 means the program was compiled while choosing the accuracy of equal error.
Nothing in CI runs this; a session lent a GPU (the ``device`` tool) runs it and records the table.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes (a CPU check of the script)")
    ap.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    ap.add_argument("--x64", action="store_true", help="float64 (default float32)")
    ap.add_argument(
        "--only",
        default="fixed,error,stiff,mujoco",
        help="comma-separated cases: fixed (fixed-step batches), error (error-controlled batches), stiff, mujoco",
    )
    args = ap.parse_args()
    only = set(args.only.split(","))
    unknown = only - {"fixed", "error", "stiff", "mujoco"}
    if unknown:
        ap.error(f"--only: unknown case(s) {sorted(unknown)}; choose from fixed, error, stiff, mujoco")

    import jax
    import jax.numpy as jnp
    import suite  # (enables x64; the dtype is set again below, before any array of a case is made)

    jax.config.update("jax_enable_x64", bool(args.x64))
    import jaxsys as js

    sizes = (64, 256) if args.quick else (1_000, 10_000, 100_000)
    tol = 1e-6 if args.x64 else 1e-4  # (the stiff batch's Diffrax tolerance: what the dtype can deliver)
    stiff_n, boxes = (16, (64,)) if args.quick else (1_024, (1_024, 10_000))
    cases = []
    for n in sizes:
        if "fixed" in only:
            cases.append(lambda n=n: suite.case_batch(n))
        if "error" in only:
            cases.append(lambda n=n: case_batch_error_controlled(n, js, jax, jnp, suite))
    if "stiff" in only:
        # to t = 300 in float64; in float32 to t = 30: past it, |x2| ~ mu during the jumps resolves only ~1e-4
        # in float32, below both methods' error targets, and some members never finish (jaxsys stops them
        # with MIN_STEP in about a second; Diffrax's vmap(Kvaerno5) ran 1,000,000 steps, 220 s on a CPU)
        stiff_tf = 300.0 if args.x64 and not args.quick else 30.0
        cases.append(lambda: suite.case_stiff_batch(stiff_n, t_final=stiff_tf, tolerance=tol))
    try:
        import mujoco  # noqa: F401
        from mujoco import mjx  # noqa: F401

        if "mujoco" in only:
            for n in boxes:
                cases.append(lambda n=n: suite.case_mujoco_batch(n))
    except ImportError:
        print("(mujoco-mjx not installed: the MuJoCo rows are left out)", file=sys.stderr)

    dev = jax.devices()[0]
    lines = [
        f"Machine: {platform.machine()}, {jax.device_count()} x {dev.platform} ({dev.device_kind}), jax "
        f"{jax.__version__}, {'float64' if args.x64 else 'float32'}; {datetime.date.today().isoformat()}"
        + (" (--quick sizes)" if args.quick else ""),
        "",
        "| case | implementation | compile s | run s (median) | run ratio vs first |",
        "|---|---|---|---|---|",
    ]
    print(lines[0])
    print("\n".join(lines[2:]))
    for case in cases:
        t0 = time.perf_counter()
        title, rows = case()
        base = rows[0][2]
        for name, comp, run in rows:
            line = f"| {title} | {name} | {comp:.2f} | {run * 1e3:.2f} ms | {run / base:.2f} |"
            lines.append(line)
            print(line, flush=True)
        print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.write:
        suite.write_block("gpu table: written by benchmarks/gpu.py --write", lines)


def case_batch_error_controlled(n, js, jax, jnp, suite):
    """``n`` pendulums (random initial angle and length) to 10 s, error-controlled, at equal final error:
    ``batch_simulate`` with RK5 at 1e-3 (its loosest accuracy; Drake's absolute norm), and Diffrax's
    vmap(Dopri5) at the loosest rtol = atol (1e-4 ... 1e-7, half decades) whose largest error over the
    batch (against fixed-step RK4 at h = 1e-3 in float64) is at most jaxsys's."""
    import numpy as np

    p, ctx = suite.pendulum()
    th = jax.random.uniform(jax.random.PRNGKey(0), (n,), minval=0.1, maxval=1.5)
    ln = jax.random.uniform(jax.random.PRNGKey(1), (n,), minval=0.5, maxval=2.0)
    dtype = th.dtype
    prm = jnp.asarray([suite.M, suite.L, suite.B, suite.G], dtype)

    def make(t, length):
        c = ctx.with_continuous_state(jnp.stack([t, jnp.zeros((), dtype)]))
        return c.with_numeric_parameter(0, prm.at[1].set(length))

    contexts = jax.vmap(make)(th, ln)

    # the reference in float64 whatever the run's dtype: fixed-step RK4 at h = 1e-3, one jitted loop on the
    # device (a NumPy loop over 100,000 members costs a minute of host time)
    m_, b_, g_ = suite.M, suite.B, suite.G
    with suite.x64():
        lengths = jnp.asarray(np.asarray(ln, np.float64))

        def field(x):
            return jnp.stack([x[1], (-b_ * x[1] - m_ * g_ * lengths * jnp.sin(x[0])) / (m_ * lengths * lengths)])

        def rk4(_, x, h=1e-3):
            k1 = field(x)
            k2 = field(x + 0.5 * h * k1)
            k3 = field(x + 0.5 * h * k2)
            k4 = field(x + h * k3)
            return x + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)

        x0 = jnp.stack([jnp.asarray(np.asarray(th, np.float64)), jnp.zeros(n, jnp.float64)])
        ref = np.asarray(jax.jit(lambda x: jax.lax.fori_loop(0, 10_000, rk4, x))(x0)).T
    rows = []
    integ = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-3)  # (RK5's loosest accuracy)
    ours = jax.jit(lambda cs: js.batch_simulate(p, cs, 10.0, integ).result.context.get_continuous_state_vector())
    err = float(np.max(np.abs(np.asarray(ours(contexts)) - ref)))
    rows.append((f"jaxsys batch_simulate RK5 1e-3, max error {err:.1e}", *suite.timeit(ours, contexts, repeats=3)))
    if suite.diffrax is not None:
        dfx = suite.diffrax

        def theirs_at(tol):
            @jax.jit
            def theirs(th, ln):
                def one(t0, length):
                    q = prm.at[1].set(length)
                    sol = dfx.diffeqsolve(
                        dfx.ODETerm(lambda t, x, a: suite.pend_f(x, q)),
                        dfx.Dopri5(),
                        0.0,
                        10.0,
                        None,
                        jnp.stack([t0, jnp.zeros((), dtype)]),
                        stepsize_controller=dfx.PIDController(rtol=tol, atol=tol),
                        max_steps=100_000,
                    )
                    return sol.ys[-1]

                return jax.vmap(one)(th, ln)

            return theirs

        for tol in (1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7):
            theirs = theirs_at(tol)
            err_d = float(np.max(np.abs(np.asarray(theirs(th, ln)) - ref)))
            if err_d <= err or tol == 1e-7:
                name = f"diffrax vmap(Dopri5) {tol:g}, max error {err_d:.1e}"
                rows.append((name, *suite.timeit(theirs, th, ln, repeats=3)))
                break
    return f"batch of {n} pendulums, error-controlled, 10 s, equal error", rows


if __name__ == "__main__":
    main()
