"""A 200-subsystem diagram and dense sampling: what jaxsys does to keep both fast.

1. A chain of 200 first-order lags built as 200 subsystems. Their contexts are stored stacked (the
   diagram context holds a handful of arrays, not 200 sets), and their dynamics are evaluated with one
   vmap. The final state is checked against the exact solution: lag k driven through k-1 others by a
   unit step is the Erlang distribution function, x_k(t) = 1 - exp(-t) sum_{i<k} t^i / i!.
2. Sampling a pendulum 1000 times in 10 s with error control: stepping to every sample time (Drake's
   AdvanceTo semantics) against dense output (samples interpolated from the steps, which then do not
   depend on them).

Run: python examples/large_diagram_and_sampling.py  (writes examples/output/sampling.png)
"""

import math
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np


jax.config.update("jax_enable_x64", True)

import jaxsys as js  # noqa: E402
from jaxsys.examples import Pendulum  # noqa: E402


OUT = pathlib.Path(__file__).resolve().parent / "output"

# ----- 1. a chain of 200 lags --------------------------------------------------------------------
N = 200
builder = js.DiagramBuilder()
prev = builder.add_named_system("step", js.ConstantVectorSource([1.0])).get_output_port()
for i in range(N):
    lag = builder.add_named_system(f"lag{i}", js.FirstOrderLowPassFilter(1.0, 1))
    builder.connect(prev, lag.get_input_port())
    prev = lag.get_output_port()
chain = builder.build("chain")
context = chain.create_default_context()
print(f"context arrays for {N + 1} subsystems: {len(jax.tree_util.tree_leaves(context))}")

integrator = js.RungeKutta5Integrator(max_step_size=1.0, target_accuracy=1e-8)
run = jax.jit(lambda c: js.simulate(chain, c, 10.0, integrator).context.get_continuous_state_vector())
start = time.perf_counter()
x = jax.block_until_ready(run(context))
compile_s = time.perf_counter() - start
start = time.perf_counter()
for _ in range(20):
    x = jax.block_until_ready(run(context))
run_ms = (time.perf_counter() - start) / 20 * 1e3
terms = np.cumprod(np.concatenate([[1.0], 10.0 / np.arange(1, N)]))  # 10^i / i!, i = 0..N-1
exact = 1.0 - math.exp(-10.0) * np.cumsum(terms)
print(f"chain of {N} lags: compile {compile_s:.2f} s, run {run_ms:.3f} ms")
print(f"chain max error vs exact {np.max(np.abs(np.asarray(x) - exact)):.2e}")

# ----- 2. dense sampling -------------------------------------------------------------------------
pendulum = Pendulum()
pctx = pendulum.get_input_port(0).fix_value(pendulum.create_default_context(), [0.0])
pctx = pctx.with_continuous_state(jnp.array([2.5, 0.0]))
ts = jnp.linspace(0.01, 10.0, 1000)
rk5 = js.RungeKutta5Integrator(max_step_size=0.1, target_accuracy=1e-9)
plain = js.simulate(pendulum, pctx, 10.0, rk5)
stepped = js.simulate(pendulum, pctx, 10.0, rk5, save_at=ts)
dense = js.simulate(pendulum, pctx, 10.0, rk5, save_at=ts, dense_output=True)
print(f"steps without samples {int(plain.stats.num_steps_taken)}")
print(f"steps stepping to 1000 samples {int(stepped.stats.num_steps_taken)}")
print(f"steps with dense output {int(dense.stats.num_steps_taken)}")
print(f"max difference of the samples {float(jnp.max(jnp.abs(dense.ys - stepped.ys))):.2e}")

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    k = np.arange(1, 41)  # beyond k = 40 the values are below 1e-9
    axes[0].plot(k, np.asarray(x)[:40], "o", ms=3, label="jaxsys")
    axes[0].plot(k, exact[:40], "-", lw=1, label="exact (Erlang CDF)")
    axes[0].set(xlabel="lag index k", ylabel="x_k(10 s)", title=f"chain of {N} lags at t = 10 s (first 40)")
    axes[0].legend()
    axes[1].plot(ts, dense.ys[:, 0], lw=1.5, label="dense output")
    axes[1].plot(ts[::25], stepped.ys[::25, 0], "o", ms=3, label="stepping to samples (every 25th)")
    axes[1].set(xlabel="t (s)", ylabel="theta (rad)", title="pendulum, 1000 samples")
    axes[1].set_ylim(-2.6, 3.9)
    axes[1].legend(loc="upper center", ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "sampling.png", dpi=110)
    print(f"wrote {OUT / 'sampling.png'}")
except ImportError:  # pragma: no cover
    print("matplotlib not installed: no plot")
