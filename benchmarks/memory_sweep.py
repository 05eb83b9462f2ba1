"""Memory over a sweep of 1,000 distinct systems (issue #35 item 4): a notebook that builds, simulates
and drops diagram variants must not grow without bound.

Each system is simulated through ``js.simulate``, ``js.Simulator`` (every 4th) and
``js.batch_simulate`` (every 8th), then dropped. Printed: the process's resident memory every 100
systems, and how many of the dropped systems are still alive, once as is and once calling
``js.clear_caches()`` every 100 systems (JAX keeps up to 2,048 traces and executables per cache of its
own, alive or not: without clearing, memory grows until those are full).

Run: ``python benchmarks/memory_sweep.py [N] [--clear-every K]``.
"""

from __future__ import annotations

import gc
import sys
import weakref

import jax
import jax.numpy as jnp

import jaxsys as js


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def one(i: int) -> weakref.ref:
    s = js.examples.SpringMassDamper(stiffness=1.0 + i, damping=0.5, has_input=False)
    ctx = s.create_default_context().with_continuous_state(jnp.array([1.0, 0.0]))
    integ = js.RungeKutta2Integrator(max_step_size=0.1)
    js.simulate(s, ctx, 0.3, integ)
    if i % 4 == 0:
        js.Simulator(s, ctx, integ).advance_to(0.3)
    if i % 8 == 0:
        js.batch_simulate(s, jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), ctx), 0.3, integ)
    return weakref.ref(s)


def main(n: int = 1000, clear_every: int = 0) -> None:
    refs = []
    print(f"clear_caches every {clear_every or 'never'}")
    print("| systems | RSS (MiB) | alive |")
    print("|---|---|---|")
    for i in range(n):
        refs.append(one(i))
        if clear_every and (i + 1) % clear_every == 0:
            js.clear_caches()
        if (i + 1) % 100 == 0:
            gc.collect()
            print(f"| {i + 1} | {rss_mib():.0f} | {sum(r() is not None for r in refs)} |", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    every = 0
    if "--clear-every" in args:
        k = args.index("--clear-every")
        every = int(args[k + 1])
        del args[k : k + 2]
    main(int(args[0]) if args else 1000, every)
