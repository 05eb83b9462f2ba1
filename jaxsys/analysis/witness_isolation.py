"""Witness detection and isolation: where in a step a witness function first crosses zero in its
direction.

**Detection** (`detect_crossings`). A witness is checked at the step's end *and* at
``WITNESS_SAMPLES - 1`` interior points of the step's quadratic continuous extension
(x(θ) = x + θ h f(t, x) + θ² (x_new - x - h f(t, x))), relative to its value at the step's start. So two
crossings inside one step (down and back up), which an end-point test cannot see, are found as long
as they are more than ``h / WITNESS_SAMPLES`` apart (on the extension, which is within O(h³) of the
step). The first sample where the witness has triggered bounds the first crossing.

**Isolation** (`isolate_crossing`). Every trial is one step of the same integrator from (t,
x), as in Drake (no interpolation). For each witness that triggered, a bracket [lo, hi] of the step
fraction (lo: not triggered, hi: triggered) is narrowed by Chandrupatla's method (inverse quadratic
interpolation where it is safe, bisection where it is not, every trial at least half a window inside
the bracket, so one-sided brackets, such as a witness that starts a step a hair from zero, converge
too, and a converged estimate closes the bracket with one more trial) until it is no wider than the
isolation window (`isolation_window`): typically 3-5 trial steps. The state lands on the
bracket's triggered end, so it is never before the crossing and at most one window after it (and at least one window
into the step, so that time always moves), and the witness cannot trigger again on the next step.
The earliest crossing among the witnesses wins.

**Derivatives.** The search runs on values whose derivatives are cut (a ``lax.while_loop``). The
landing fraction and state are then `land_at_crossing`'s: the fraction's value is the search's, its derivatives
(custom JVP rule, itself differentiable, so to any order) are those of the zero of the function that
was root-found, tau -> w(t + tau, step(t, x, tau)), by the implicit function theorem, with that
function's own rate (the trial step map's, not the ODE's): the derivative of what was computed, for
every integrator and step size.

Imports: `event_loop` (``EventProgram``) only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .event_loop import EventProgram


if TYPE_CHECKING:
    from ..framework.context import Context


Array = jax.Array

WITNESS_SAMPLES = 4  # witness checks per step (the end point and 3 interior points)
ISOLATION_ULPS = 16  # the isolation window is at least this many units in the last place of time
_MAX_ITERATIONS = 200  # bound on bracketing iterations


def isolation_window(
    t: Array, h: Array, iterations: int, accuracy: float | None = None, characteristic_time: float = 1.0
) -> Array:
    """Width, s, to which a crossing in a step of size ``h`` from ``t`` is isolated: ``h * 2**-iterations``,
    or, when the context has an accuracy set, Drake's ``0.01 * accuracy * characteristic_time``
    (``Simulator::GetCurrentWitnessTimeIsolation``: the characteristic time is 1 s with error control,
    the maximum step in fixed-step mode); at least ``ISOLATION_ULPS`` units in the last place of the
    time (in float32 ~2e-6 max(1, |t|)), so that landing past the crossing always moves time forward."""
    eps = float(jnp.finfo(t.dtype).eps)
    resolution = ISOLATION_ULPS * eps * jnp.maximum(1.0, jnp.abs(t) + jnp.abs(h))
    wanted = h * (2.0**-iterations) if accuracy is None else jnp.asarray(0.01 * accuracy * characteristic_time, t.dtype)
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
    `detect_crossings` saw it trigger (``fired``: shape (samples, witnesses))."""
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
    (`detect_crossings`); `window`: the isolation window, s.

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

    def setup(g_lo0: Array, g_hi0: Array) -> tuple[Array, Array, Array, Array, Array]:
        """From the values at the detected bracket's ends: (active, ref, lo, hi, value at hi)."""
        g_lo0 = jnp.where(lo0 <= 0, w0_, g_lo0)
        g_hi0 = jnp.where(hi0 >= h_, w1_, g_hi0)
        confirmed = candidates & program.triggered(g_lo0, g_hi0)
        whole = candidates & ~confirmed & program.triggered(w0_, w1_)  # else fall back to the whole step
        active = confirmed | whole
        ref = jnp.where(confirmed, g_lo0, w0_)  # each bracket is judged against the value at its start
        lo = jnp.where(confirmed, lo0, 0.0)
        hi = jnp.where(confirmed, hi0, h_)
        g_hi = jnp.where(confirmed, g_hi0, w1_)
        return active, ref, lo, hi, g_hi

    # confirm the detected bracket with trial steps (interior samples came from the extension), only
    # at the ends inside the step (at its ends the values are known): the trials are the first passes
    # of the search's loop (one copy of the trial step in the program)
    confirm = (jnp.any(candidates & (lo0 > 0)), jnp.any(candidates & (hi0 < h_)))
    active, ref, lo, hi = _bracket(
        program, per_witness, setup, confirm, (lo0, jnp.minimum(hi0, h_)), (w0_, w1_), window_
    )

    # the earliest crossing among the witnesses that triggered
    first = jnp.argmin(jnp.where(active, hi, jnp.inf))
    isolated = jnp.any(active)

    def fired_at(values: Array) -> Array:
        return active & program.triggered(ref, values)

    # land on the bracket's triggered end (where the search saw the witness triggered), but at least
    # one window into the step (time must move, also when the crossing is at the step's very start)
    tau_hi = sg(jnp.where(isolated, jnp.clip(hi[first], window_, h_), h_))

    def landing(tau: Array) -> tuple[Array, Array]:
        """The state after a trial step of ``tau`` and the first witness there: the function whose
        witness's zero the search found."""
        x = step_to(tau)
        return x, program.witness_values(make_ctx(t + tau, x))[first]

    # the landing fraction (tau_hi's value, with the derivatives of the zero of the first witness, to
    # any order) and the state there (with the derivatives of the trial step at that fraction)
    # (a step kept whole lands at its end, with the step size's derivatives, if any, as before)
    tau, x_land = land_at_crossing(landing, jnp.where(isolated, tau_hi, h), isolated)
    # the events that fire are judged on the state actually kept (if rounding left it untriggered,
    # none fire now: the next step starts a hair before the crossing and finds it again)
    trig = fired_at(program.witness_values(make_ctx(sg(t + tau), sg(x_land))))
    trig = jnp.where(isolated, trig, program.triggered(w0, w1))
    return t + tau, x_land, trig, isolated


def land_at_crossing(
    landing: Callable[[Array], tuple[Array, Array]], tau: Array, isolated: Array
) -> tuple[Array, Array]:
    """The landing fraction and the state there, ``(tau, landing(tau)[0])``, where ``landing(s)`` is
    (the state after a trial step of ``s``, the first witness there) and ``tau`` the zero of that
    witness the bracket search found (within the isolation window of it).

    The fraction's derivatives with respect to the arrays ``landing`` closes over are those of the
    zero, by the implicit function theorem on the function that was root-found,
    dtau* = -(dg/dp . dp) / (dg/dtau) at tau*: the rate is that of the trial step map (the
    integrator's step as a function of its size), not the ODE's, so AD is the derivative of what was
    computed, for every integrator and step size; the state's are the trial step's in its arrays and
    in the fraction, dx = dx/dp . dp + dx/dtau . dtau*. Both come from two JVPs of ``landing`` at
    tau* (in its arrays, and in the fraction), so the program holds the trial step and the witness
    once per JVP, not once more each for the fraction and for the state. The rule calls the function
    again, so it is differentiable in turn: second and higher derivatives (Hessians through impacts)
    are exact too. A zero where the witness is flat (a grazing crossing, dg/dtau = 0) has no
    derivative; it is given that of dg/dtau = 1 rather than an infinity. Where not ``isolated`` (the
    step kept whole) ``tau`` is the step's size and keeps its own derivatives."""
    # the arrays landing closes over become an explicit (differentiated) argument
    dynamic, static = eqx.partition(eqx.filter_closure_convert(landing, tau), eqx.is_array)

    def landing_of(p: Any, tt: Array) -> tuple[Array, Array]:
        return eqx.combine(p, static)(tt)

    def linearized(p: Any, tau0: Array, iso: Array, dp: Any, dtau0: Array) -> tuple[Array, Array, Array, Array]:
        """(tau, x there, dtau, dx): ``landing`` linearized once at tau*, its linear map applied in its
        arrays (dp) and in its fraction (1): the program holds the trial step once for the value (two
        JVPs, and the value again, held it three times)."""
        float0 = jax.dtypes.float0
        tau = land_time(p, tau0, iso)  # tau0, carrying the zero's derivatives at outer levels (higher orders)
        (x, _), lin = jax.linearize(landing_of, p, tau)
        dx_p, dg_p = lin(dp, jnp.zeros_like(tau))
        zero_p = jax.tree_util.tree_map(
            lambda a: jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.inexact) else np.zeros(a.shape, float0), p
        )
        dx_tau, dg_tau = lin(zero_p, jnp.ones_like(tau))
        dg_tau = jnp.where(dg_tau != 0, dg_tau, 1.0)
        dtau = jnp.where(iso, -dg_p / dg_tau, dtau0).astype(jnp.result_type(tau))
        return tau, x, dtau, dx_p + dx_tau * dtau.astype(jnp.result_type(dx_tau))

    @jax.custom_jvp
    def land_time(p: Any, tau0: Array, iso: Array) -> Array:
        return tau0

    @land_time.defjvp
    def land_time_jvp(primals: tuple, tangents: tuple) -> tuple[Array, Array]:
        tau, _, dtau, _ = linearized(*primals, *tangents[:2])
        return tau, dtau

    @jax.custom_jvp
    def land(p: Any, tau0: Array, iso: Array) -> tuple[Array, Array]:
        return tau0, landing_of(p, tau0)[0]

    @land.defjvp
    def land_jvp(primals: tuple, tangents: tuple) -> tuple[Any, Any]:
        # (where iso, tau0 is the search's result: no derivative of its own)
        tau, x, dtau, dx = linearized(*primals, *tangents[:2])
        return (tau, x), (dtau, dx)

    return land(dynamic, tau, isolated)


def _bracket(
    program: EventProgram,
    values: Callable[[Array], Array],
    setup: Callable[[Array, Array], tuple[Array, Array, Array, Array, Array]],
    confirm: tuple[Array, Array],
    ends: tuple[Array, Array],
    known: tuple[Array, Array],
    window: Array,
) -> tuple[Array, Array, Array, Array]:
    """Narrow each active witness's bracket [lo, hi] to ``window`` (see the module docstring): an end is
    "triggered" when going from ``ref`` (the value at the bracket's initial start) to its value
    triggers the witness.

    The loop's first passes evaluate the witnesses at the detected bracket's ends (``ends``: its
    start where ``confirm[0]``, its end where ``confirm[1]``; elsewhere the ``known`` values at the
    step's ends stand) and ``setup`` turns those values into the brackets to search, ``(active, ref,
    lo, hi, value at hi)``. Returns ``(active, ref, lo, hi)``; inactive witnesses are left alone.

    Chandrupatla's method (Chandrupatla 1997; as in Scherer, *Computational Physics*): inverse
    quadratic interpolation through the last three points where it is safe, bisection where it is
    not, and every trial at least half a window inside the bracket, so that once the estimate is
    within half a window of the crossing the next trial straddles it and the bracket closes. The
    first trial is the secant (regula falsi) point of the initial bracket. Safeguard: a trial after
    three iterations that did not halve the bracket is a bisection, so the width halves at least every
    fourth iteration whatever the witness."""
    half = 0.5 * window

    def safe_div(n: Array, d: Array) -> Array:
        return n / jnp.where(d != 0, d, 1.0)

    def start(g_lo0: Array, g_hi0: Array) -> tuple[Any, ...]:
        """(active, ref, the search's state) from the values at the detected bracket's ends."""
        active, ref, lo, hi, g_hi = setup(g_lo0, g_hi0)
        dtype = hi.dtype
        f_lo, f_hi = ref.astype(dtype), g_hi.astype(dtype)
        # x1: the newest point, x2: the other end of the bracket, x3: the point x1 or x2 replaced
        width0 = hi - lo
        t0 = jnp.where(f_hi != f_lo, safe_div(f_lo, f_lo - f_hi), 0.5)
        t0 = jnp.clip(t0, safe_div(half, width0), 1.0 - safe_div(half, width0))
        w_past = (2.0 * width0,) * 3  # bracket widths after the last three iterations
        return active, ref, (lo, f_lo, jnp.zeros(hi.shape, bool), hi, f_hi, lo, f_lo, t0, w_past)

    # (phase 0, 1: the confirming trials at the bracket's start and end; 2: the search)
    state = (
        jnp.where(confirm[0], 0, jnp.where(confirm[1], 1, 2)),
        known[0],
        *start(*known),
        jnp.zeros((), jnp.int32),
    )

    def cond(state: Any) -> Array:
        phase, _, active, _, (x1, _, _, x2, *_), it = state
        return (phase < 2) | (jnp.any(active & (jnp.abs(x2 - x1) > window)) & (it < _MAX_ITERATIONS))

    def body(state: Any) -> Any:
        phase, g_first, active, ref, search, it = state
        x1, f1, trig1, x2, f2, x3, f3, t, (wa, wb, wc) = search
        searching = phase == 2
        move = searching & active & (jnp.abs(x2 - x1) > window)
        xt = jnp.where(phase == 0, ends[0], jnp.where(phase == 1, ends[1], x1 + t * (x2 - x1)))
        ft = values(xt)
        f = ft.astype(x1.dtype)
        trig_t = program.triggered(ref, f)
        same = trig_t == trig1  # xt replaces x1 (x2 stays) or the bracket flips to [x1, xt]
        x3n, f3n = jnp.where(same, x1, x2), jnp.where(same, f1, f2)
        x2n, f2n = jnp.where(same, x2, x1), jnp.where(same, f2, f1)
        x1n, f1n = xt, f
        # next trial: inverse quadratic interpolation through (x1, x2, x3) where safe, else bisection
        xi = safe_div(x1n - x2n, x3n - x2n)
        phi = safe_div(f1n - f2n, f3n - f2n)
        iqi = (phi * phi < xi) & ((1.0 - phi) ** 2 < 1.0 - xi)
        t_iqi = safe_div(f1n, f2n - f1n) * safe_div(f3n, f2n - f3n) + safe_div(x3n - x1n, x2n - x1n) * safe_div(
            f1n, f3n - f1n
        ) * safe_div(f2n, f3n - f2n)
        width = jnp.abs(x2n - x1n)
        iqi = iqi & (width <= 0.5 * wc)
        tl = safe_div(half, width)
        t_new = jnp.clip(jnp.where(iqi, t_iqi, 0.5), tl, 1.0 - tl)
        new = (x1n, f1n, trig_t, x2n, f2n, x3n, f3n, t_new, width, wa, wb)
        old = (x1, f1, trig1, x2, f2, x3, f3, t, wa, wb, wc)
        *kept, wa, wb, wc = (jnp.where(move, a, b) for a, b in zip(new, old))
        searched = (active, ref, (*kept, (wa, wb, wc)))
        # (the last confirming trial: the search starts from their values)
        at_start = phase == 0
        starting = (at_start & ~confirm[1]) | (phase == 1)
        started = start(jnp.where(at_start, ft, g_first), jnp.where(at_start, known[1], ft))
        active, ref, search = jax.tree_util.tree_map(lambda a, b: jnp.where(starting, a, b), started, searched)
        nxt = jnp.where(starting | searching, 2, 1)
        return nxt, jnp.where(at_start, ft, g_first), active, ref, search, jnp.where(searching, it + 1, it)

    _, _, active, ref, (x1, _, trig1, x2, *_), _ = jax.lax.while_loop(cond, body, state)
    return active, ref, jnp.where(trig1, x2, x1), jnp.where(trig1, x1, x2)
