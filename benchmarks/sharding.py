"""Throughput of batch_simulate sharded over 1, 2, 4 and 8 emulated CPU devices (issue: batched and
sharded simulation). Each device count runs in its own process (XLA_FLAGS must be set before JAX
starts). On this 2-core machine expect at most ~2x; on a GPU host, run with --gpu.

    python benchmarks/sharding.py [--n 4096] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _results import write_block


def measure(n: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh

    jax.config.update("jax_enable_x64", True)
    import jaxsys as js
    from jaxsys.examples import Pendulum

    p = Pendulum()
    base = p.get_input_port(0).fix_value(p.create_default_context(), [0.0])
    ctxs = js.randomize_contexts(
        jax.random.PRNGKey(0), base, n, parameters={(0, 1): js.Uniform(0.5, 2.0)}, states={0: js.Uniform(0.1, 1.5)}
    )
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    integ = js.RungeKutta4Integrator(max_step_size=1e-3)
    t = time.perf_counter()
    r = js.batch_simulate(p, ctxs, 10.0, integ, mesh=mesh)
    jax.block_until_ready(r.result.context.time)
    first = time.perf_counter() - t
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        r = js.batch_simulate(p, ctxs, 10.0, integ, mesh=mesh)
        jax.block_until_ready(r.result.context.time)
        runs.append(time.perf_counter() - t)
    best = sorted(runs)[1]
    del jnp
    return {"devices": jax.device_count(), "n": n, "first_s": first, "run_s": best, "steps_per_s": n * 10_000 / best}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--child", type=int, default=0)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.n)))
        return
    rows = []
    for d in (1, 2, 4, 8):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={d}")
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(d), "--n", str(args.n)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]["steps_per_s"]
    lines = [
        f"S6-sharded: {args.n} pendulums, RK4 h=1e-3, 10 s, batch_simulate over emulated CPU devices "
        f"({os.cpu_count()} cores)",
        "",
        "| devices | compile+first s | run s | pendulum-steps/s | speed-up vs 1 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['devices']} | {r['first_s']:.2f} | {r['run_s']:.3f} | {r['steps_per_s']:.3g} | "
            f"{r['steps_per_s'] / base:.2f} |"
        )
    print("\n".join(lines))
    if args.write:
        write_block("sharding table: written by benchmarks/sharding.py --write", lines)


if __name__ == "__main__":
    main()
