"""Witness isolation: where in a step a witness function first crosses zero in its direction.

When a witness triggers over an accepted step, :func:`isolate_crossing` finds its first crossing by
regula falsi (Illinois) on trial steps of the same integrator, lands the state just past it, and gives
the landing time the implicit-function-theorem derivative of the crossing time.

Imports: :mod:`.event_loop` (``EventProgram``) only.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .event_loop import EventProgram


Array = jax.Array


def isolate_crossing(
    program: EventProgram,
    integrator: Any,
    f: Any,
    aux: Any,
    make_ctx: Any,
    t: Array,
    x: Array,
    h: Array,
    w0: Array,
    w1: Array,
    iterations: int,
) -> tuple[Array, Array, Array]:
    """The first witness crossing in a step of size ``h`` from (t, x); ``w0``, ``w1``: the witness
    values at its start and end.

    Every trial is one step of the same integrator from (t, x), as in Drake (no interpolation). For
    each witness that triggered over the step, the Illinois variant of regula falsi on
    tau -> w(t + tau, step(tau)) brackets its zero (superlinear: ~10 trial steps where bisection to
    the same precision takes 40); the earliest zero wins. The state lands just past it (as Drake
    does), ``h * 2**-iterations`` after the zero estimate or the first of a few wider margins at which
    the witness has triggered, so it cannot trigger again on the next step. For derivatives, the
    landing time carries the implicit-function-theorem sensitivity of the crossing time t*: a Newton
    correction t* = t_hi - w(t_hi) / (dw/dt) whose value is dropped but whose derivative,
    -(dw/dtheta) / (dw/dt), is kept.
    Returns (landing time, state there, which witnesses triggered).
    """
    n_w = len(program.witnesses)

    def step_to(tau: Array) -> Array:
        return integrator.attempt_step(f, t, x, tau, aux)[0]

    def values_at(tau: Array) -> Array:
        return program.witness_values(make_ctx(t + tau, step_to(tau)))

    candidates = program.triggered(w0, w1)

    def illinois(_: int, state: Any) -> Any:
        # per witness: bracket [lo, hi] (lo: not triggered, hi: triggered), the values there, and
        # which end moved last (+1 hi, -1 lo)
        lo, hi, g_lo, g_hi, last = state
        denom = g_hi - g_lo
        guess = jnp.where(denom != 0, lo - g_lo * (hi - lo) / jnp.where(denom != 0, denom, 1.0), 0.5 * (lo + hi))
        width = hi - lo
        mid = jnp.clip(guess, lo + 1e-3 * width, hi - 1e-3 * width)  # strictly inside
        g_mid = jax.vmap(lambda j, tau: values_at(tau)[j])(jnp.arange(n_w), mid)
        fired = program.triggered(w0, g_mid)  # witness j judged at its own trial time
        # Illinois: when the same end moves twice in a row, halve the value kept at the other end
        g_lo = jnp.where(fired & (last == 1), 0.5 * g_lo, g_lo)
        g_hi = jnp.where(~fired & (last == -1), 0.5 * g_hi, g_hi)
        return (
            jnp.where(fired, lo, mid),
            jnp.where(fired, mid, hi),
            jnp.where(fired, g_lo, g_mid),
            jnp.where(fired, g_mid, g_hi),
            jnp.where(fired, 1, -1).astype(jnp.int32),
        )

    zeros = jnp.zeros((n_w,), h.dtype)
    his = jnp.broadcast_to(h, (n_w,)).astype(h.dtype)
    state0 = (zeros, his, w0.astype(h.dtype), w1.astype(h.dtype), jnp.zeros((n_w,), jnp.int32))
    _, hi, _, _, _ = jax.lax.stop_gradient(jax.lax.fori_loop(0, _ILLINOIS_ITERATIONS, illinois, state0))
    # the earliest crossing among the witnesses that triggered over the whole step
    first = jnp.argmin(jnp.where(candidates, hi, jnp.inf))
    root_hi = hi[first]
    # land just past it: a margin beyond the bracket's triggered end (so that rounding in the landing
    # step cannot leave the state on the untriggered side), the first of a few widening margins at
    # which the witness has triggered; the full step (which triggered) if none did
    margins = h * (2.0**-iterations) * (4.0 ** jnp.arange(_LANDING_TRIES, dtype=h.dtype))
    taus = jnp.minimum(root_hi + margins, h)
    fires = jax.vmap(lambda tau: jnp.any(program.triggered(w0, values_at(tau))))(taus)
    hi_land = jax.lax.stop_gradient(jnp.where(jnp.any(fires), taus[jnp.argmax(fires)], h))
    t_hi = t + hi_land
    x_hi = step_to(hi_land)
    trig = program.triggered(w0, program.witness_values(make_ctx(t_hi, x_hi)))
    j = jnp.argmax(trig)

    def wj(tt: Array, xx: Array) -> Array:
        return program.witness_values(make_ctx(tt, xx))[j]

    w_val, dwdt = jax.jvp(wj, (t_hi, x_hi), (jnp.ones_like(t_hi), f(t_hi, x_hi)))
    dwdt = jax.lax.stop_gradient(jnp.where(jnp.abs(dwdt) > 0, dwdt, 1.0))
    t_star = t_hi - w_val / dwdt
    t_land = t_star + jax.lax.stop_gradient(t_hi - t_star)
    return t_land, step_to(t_land - t), trig


_ILLINOIS_ITERATIONS = 10
_LANDING_TRIES = 6
