"""GPU benchmark (issue #40 item 4): the batched rows in one command, a table for RESULTS.md.

    python benchmarks/gpu.py              # full sizes (meant for a GPU)
    python benchmarks/gpu.py --quick      # small sizes: checks the script on a CPU in a minute or two
    python benchmarks/gpu.py --write      # also writes the "gpu table" block of benchmarks/RESULTS.md
    python benchmarks/gpu.py --x64        # float64 (default float32, what GPU batches usually run)

Rows (each a ratio against the first row of its case, measured side by side in this process):
- batches of 1k / 10k / 100k pendulums, fixed-step RK4 (h = 1e-3, 10 s): ``batch_simulate`` against a
  hand-written ``jit(vmap(fori_loop(rk4)))`` (the floor);
- the same batches error-controlled (RK5 at 1e-5): ``batch_simulate`` against Diffrax's
  ``jit(vmap(diffeqsolve(Dopri5)))`` with rtol = atol = 1e-5;
- the stiff batch (1,024 Van der Pol, mu ~ U[100, 1000], Radau5) against Diffrax's vmap(Kvaerno5) at
  equal final error (suite.py's S3d);
- the MuJoCo rollouts (1,024 and 10,000 randomized boxes with contacts, 300 steps) against a raw
  ``jit(vmap(scan(mjx.step)))`` (suite.py's S10-batch), where mujoco-mjx is installed.

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
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import suite  # (enables x64; the dtype is set again below, before any array of a case is made)

    jax.config.update("jax_enable_x64", bool(args.x64))
    import jaxsys as js

    sizes = (64, 256) if args.quick else (1_000, 10_000, 100_000)
    stiff_n, boxes = (16, (64,)) if args.quick else (1_024, (1_024, 10_000))
    cases = []
    for n in sizes:
        cases.append(lambda n=n: suite.case_batch(n))
        cases.append(lambda n=n: case_batch_error_controlled(n, js, jax, jnp, suite))
    cases.append(lambda: suite.case_stiff_batch(stiff_n, t_final=30.0 if args.quick else 300.0))
    try:
        import mujoco  # noqa: F401
        from mujoco import mjx  # noqa: F401

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
    """``n`` pendulums (random initial angle and length), RK5 at 1e-5 to 10 s: ``batch_simulate``
    against Diffrax's vmap(Dopri5) with rtol = atol = 1e-5."""
    p, ctx = suite.pendulum()
    th = jax.random.uniform(jax.random.PRNGKey(0), (n,), minval=0.1, maxval=1.5)
    ln = jax.random.uniform(jax.random.PRNGKey(1), (n,), minval=0.5, maxval=2.0)
    dtype = th.dtype
    prm = jnp.asarray([suite.M, suite.L, suite.B, suite.G], dtype)

    def make(t, length):
        c = ctx.with_continuous_state(jnp.stack([t, jnp.zeros((), dtype)]))
        return c.with_numeric_parameter(0, prm.at[1].set(length))

    contexts = jax.vmap(make)(th, ln)
    integ = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-5)
    ours = jax.jit(lambda cs: js.batch_simulate(p, cs, 10.0, integ).result.context.get_continuous_state_vector())
    rows = [("jaxsys batch_simulate RK5", *suite.timeit(ours, contexts, repeats=3))]
    if suite.diffrax is not None:
        dfx = suite.diffrax

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
                    stepsize_controller=dfx.PIDController(rtol=1e-5, atol=1e-5),
                    max_steps=100_000,
                )
                return sol.ys[-1]

            return jax.vmap(one)(th, ln)

        rows.append(("diffrax vmap(Dopri5)", *suite.timeit(theirs, th, ln, repeats=3)))
    return f"batch of {n} pendulums, error-controlled 1e-5, 10 s", rows


if __name__ == "__main__":
    main()
