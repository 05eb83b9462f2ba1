"""Witness detection and isolation: where in a step a witness function first crosses zero in its
direction.

**Detection** (:func:`detect_crossings`). A witness is checked at the step's end *and* at
``WITNESS_SAMPLES - 1`` interior points of the step's quadratic continuous extension
(x(θ) = x + θ h f(t, x) + θ² (x_new - x - h f(t, x))), relative to its value at the step's start. So two
crossings inside one step (down and back up), which an end-point test cannot see, are found as long
as they are more than ``h / WITNESS_SAMPLES`` apart (on the extension, which is within O(h³) of the
step). The first sample where the witness has triggered bounds the first crossing.

**Isolation** (:func:`isolate_crossing`). Every trial is one step of the same integrator from (t,
x), as in Drake (no interpolation). For each witness that triggered, a bracket [lo, hi] of the step
fraction (lo: not triggered, hi: triggered) is narrowed by the Illinois variant of regula falsi with
a bisection safeguard (a bisection whenever two iterations did not halve the bracket, so one-sided
brackets, such as a witness that starts a step a hair from zero, converge too) until it is no wider
than the isolation window (:func:`isolation_window`). The state lands on the bracket's triggered
end, so it is never before the crossing and at most one window after it (and at least one window
into the step, so that time always moves), and the witness cannot trigger again on the next step.
The earliest crossing among the witnesses wins.

**Derivatives.** The search runs on values whose derivatives are cut (a ``lax.while_loop``); the
landing time carries the implicit-function-theorem sensitivity of the crossing time t*: a Newton
correction t* = t_hi - w(t_hi) / (dw/dt) whose value is dropped but whose derivative,
-(dw/dθ) / (dw/dt), is kept.

Imports: :mod:`.event_loop` (``EventProgram``) only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from .event_loop import EventProgram


if TYPE_CHECKING:
    from ..framework.context import Context


Array = jax.Array

WITNESS_SAMPLES = 4  # witness checks per step (the end point and 3 interior points)
ISOLATION_ULPS = 16  # the isolation window is at least this many units in the last place of time
_MAX_ITERATIONS = 200  # bound on bracketing iterations (bisection every third: ~3 log2(h / window))


def isolation_window(t: Array, h: Array, iterations: int, accuracy: float | None = None) -> Array:
    """Width, s, to which a crossing in a step of size ``h`` from ``t`` is isolated: ``h * 2**-iterations``,
    or, when the context has an accuracy set, Drake's ``0.01 * accuracy * 1 s``
    (``Simulator::GetCurrentWitnessTimeIsolation``); at least ``ISOLATION_ULPS`` units in the last
    place of the time (in float32 ~2e-6 max(1, |t|)), so that landing past the crossing always moves
    time forward."""
    eps = float(jnp.finfo(t.dtype).eps)
    resolution = ISOLATION_ULPS * eps * jnp.maximum(1.0, jnp.abs(t) + jnp.abs(h))
    wanted = h * (2.0**-iterations) if accuracy is None else jnp.asarray(0.01 * accuracy, t.dtype)
    return jnp.maximum(wanted, resolution)


def detect_crossings(
    program: EventProgram,
    make_ctx: Callable[[Array, Array], Context],
    t: Array,
    x: Array,
    h: Array,
    t_new: Array,
    f0: Array,
    x_new: Array,
    w0: Array,
) -> tuple[Array, Array]:
    """Per sample of the step (the interior points of the extension, then its end) and witness: whether
    the witness triggers between the previous sample (or the step's start) and this one; and the
    witness values at the step's end. See the module docstring. Not differentiated."""
    m = WITNESS_SAMPLES
    sg = jax.lax.stop_gradient
    t, x, h, t_new, f0, x_new, w0 = (sg(v) for v in (t, x, h, t_new, f0, x_new, w0))
    thetas = jnp.arange(1, m, dtype=t.dtype) / m
    slope = h * f0
    curve = x_new - x - slope
    # (no concatenation of states: it would split the fused evaluation into more kernels)
    inner = jax.vmap(lambda th: program.witness_values(make_ctx(t + th * h, x + th * slope + (th * th) * curve)))(
        thetas
    )
    w1 = program.witness_values(make_ctx(t_new, x_new))
    pairs = [program.triggered(w0, inner[0])]
    pairs += [program.triggered(inner[i - 1], inner[i]) for i in range(1, m - 1)]
    pairs.append(program.triggered(inner[m - 2], w1))
    return jnp.stack(pairs), w1


def first_bracket(fired: Array, h: Array) -> tuple[Array, Array]:
    """Per witness, the step fractions (lo, hi), s, of the first pair of samples between which
    :func:`detect_crossings` saw it trigger (``fired``: shape (samples, witnesses))."""
    m = fired.shape[0]
    first = jnp.argmax(fired, axis=0).astype(h.dtype)
    return first * (h / m), (first + 1.0) * (h / m)


def isolate_crossing(
    program: EventProgram,
    integrator: Any,
    f: Any,
    aux: Any,
    make_ctx: Callable[[Array, Array], Context],
    t: Array,
    x: Array,
    h: Array,
    w0: Array,
    w1: Array,
    candidates: Array,
    lo0: Array,
    hi0: Array,
    window: Array,
) -> tuple[Array, Array, Array, Array]:
    """The first witness crossing in a step of size ``h`` from (t, x).

    **Arguments:** `w0`, `w1`: the witness values at the step's ends; `candidates`, `lo0`, `hi0`: per
    witness, whether detection saw it trigger and between which step fractions, s
    (:func:`detect_crossings`); `window`: the isolation window, s.

    **Returns:** (landing time, state there, which witnesses triggered there, whether a crossing was
    isolated: False when no trial step confirms the detection, and the step is then kept whole).
    """
    n_w = len(program.witnesses)

    def step_to(tau: Array) -> Array:
        return integrator.attempt_step(f, t, x, tau, aux)[0]

    def values_at(tau: Array) -> Array:
        return program.witness_values(make_ctx(t + tau, step_to(tau)))

    # The bracket search is not differentiated: its inputs, closed-over arrays included, are cut.
    all_values, consts = jax.closure_convert(values_at, h)
    consts = [jax.lax.stop_gradient(c) for c in consts]
    sg = jax.lax.stop_gradient
    w0_, w1_, h_, window_ = sg(w0), sg(w1), sg(h), sg(window)
    lo0, hi0 = sg(lo0), sg(hi0)

    def per_witness(tau: Array) -> Array:
        """Witness j's value at its own trial fraction tau[j]."""
        return jax.vmap(lambda j, tt: all_values(tt, *consts)[j])(jnp.arange(n_w), tau)

    # confirm the detected bracket with trial steps (interior samples came from the extension)
    # (a trial step only where the bracket's end is inside the step: at its ends the values are known)
    g_lo0 = jax.lax.cond(jnp.any(candidates & (lo0 > 0)), lambda: per_witness(lo0), lambda: w0_)
    g_lo0 = jnp.where(lo0 <= 0, w0_, g_lo0)
    g_hi0 = jax.lax.cond(jnp.any(candidates & (hi0 < h_)), lambda: per_witness(jnp.minimum(hi0, h_)), lambda: w1_)
    g_hi0 = jnp.where(hi0 >= h_, w1_, g_hi0)
    confirmed = candidates & program.triggered(g_lo0, g_hi0)
    whole = candidates & ~confirmed & program.triggered(w0_, w1_)  # else fall back to the whole step
    active = confirmed | whole
    ref = jnp.where(confirmed, g_lo0, w0_)  # each bracket is judged against the value at its start
    lo = jnp.where(confirmed, lo0, 0.0)
    hi = jnp.where(confirmed, hi0, h_)
    g_hi = jnp.where(confirmed, g_hi0, w1_)
    lo, hi = _bracket(program, per_witness, active, ref, lo, hi, g_hi, window_)
    # the earliest crossing among the witnesses that triggered
    first = jnp.argmin(jnp.where(active, hi, jnp.inf))
    isolated = jnp.any(active)

    def fired_at(values: Array) -> Array:
        return active & program.triggered(ref, values)

    # land on the bracket's triggered end (where the search saw the witness triggered), but at least
    # one window into the step (time must move, also when the crossing is at the step's very start)
    tau_land = sg(jnp.where(isolated, jnp.clip(hi[first], window_, h_), h_))
    # derivative of the crossing time t* (implicit function theorem at the landing point): a Newton
    # correction whose value is exactly zero (d - stop_gradient(d)) but whose derivative is dt*
    x_hi = step_to(tau_land)
    t_hi = t + tau_land
    j = jnp.argmax(fired_at(program.witness_values(make_ctx(t_hi, x_hi))))

    def wj(tt: Array, xx: Array) -> Array:
        return program.witness_values(make_ctx(tt, xx))[j]

    w_val, dwdt = jax.jvp(wj, (t_hi, x_hi), (jnp.ones_like(t_hi), f(t_hi, x_hi)))
    dwdt = sg(jnp.where(jnp.abs(dwdt) > 0, dwdt, 1.0))
    correction = -w_val / dwdt
    delta = jnp.where(isolated, correction - sg(correction), 0.0)
    t_land = t_hi + delta
    x_land = step_to(tau_land + delta)
    # the events that fire are judged on the state actually kept (if rounding left it untriggered,
    # none fire now: the next step starts a hair before the crossing and finds it again)
    trig = fired_at(program.witness_values(make_ctx(t_land, x_land)))
    trig = jnp.where(isolated, trig, program.triggered(w0, w1))
    return t_land, x_land, trig, isolated


def _bracket(
    program: EventProgram,
    values: Callable[[Array], Array],
    active: Array,
    ref: Array,
    lo: Array,
    hi: Array,
    g_hi: Array,
    window: Array,
) -> tuple[Array, Array]:
    """Narrow each active witness's bracket [lo, hi] to ``window`` (see the module docstring): an end is
    "triggered" when going from ``ref`` (the value at the bracket's initial start) to its value
    triggers the witness.

    Illinois regula falsi: when the same end moves twice in a row, the value kept at the other end is
    halved. Safeguard: an iteration whose bracket is not at most half as wide as two iterations before
    bisects (so the width halves at least every third iteration). Returns (lo, hi); inactive witnesses
    are left alone."""
    dtype = hi.dtype
    g_lo = ref.astype(dtype)
    last = jnp.zeros(hi.shape, jnp.int32)  # which end moved last (+1 hi, -1 lo)
    width0 = hi - lo

    def unconverged(lo: Array, hi: Array) -> Array:
        return active & (hi - lo > window)

    def cond(state: Any) -> Array:
        lo, hi, _, _, _, _, _, it = state
        return jnp.any(unconverged(lo, hi)) & (it < _MAX_ITERATIONS)

    def body(state: Any) -> Any:
        lo, hi, g_lo, g_hi, last, w_prev, w_prev2, it = state
        width = hi - lo
        denom = g_hi - g_lo
        guess = jnp.where(denom != 0, lo - g_lo * width / jnp.where(denom != 0, denom, 1.0), lo + 0.5 * width)
        guess = jnp.clip(guess, lo + 1e-3 * width, hi - 1e-3 * width)  # strictly inside
        bisect = width > 0.5 * w_prev2
        mid = jnp.where(bisect, lo + 0.5 * width, guess)
        g_mid = values(mid)
        fired = program.triggered(ref, g_mid)  # witness j judged at its own trial time
        move = unconverged(lo, hi)
        g_lo_k = jnp.where(fired & (last == 1) & ~bisect, 0.5 * g_lo, g_lo)
        g_hi_k = jnp.where(~fired & (last == -1) & ~bisect, 0.5 * g_hi, g_hi)
        new = (
            jnp.where(fired, lo, mid),
            jnp.where(fired, mid, hi),
            jnp.where(fired, g_lo_k, g_mid),
            jnp.where(fired, g_mid, g_hi_k),
            jnp.where(fired, 1, -1).astype(jnp.int32),
        )
        lo, hi, g_lo, g_hi, last = (jnp.where(move, a, b) for a, b in zip(new, (lo, hi, g_lo, g_hi, last)))
        return lo, hi, g_lo, g_hi, last, width, w_prev, it + 1

    state = (lo, hi, g_lo, g_hi.astype(dtype), last, width0, 2.0 * width0, jnp.zeros((), jnp.int32))
    lo, hi, *_ = jax.lax.while_loop(cond, body, state)
    return lo, hi
