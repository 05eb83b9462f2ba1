"""Saving: the ``save_at`` times, their buffers, and the outer loop that fills them.

* `check_save_times`: eager checks of ``save_at`` (increasing, within ``t_final``).
* `record_buffer` / `write_row`: buffers of the ``record`` function's pytree.
* `run_with_saving`: for the while loop, an outer loop over the save times around the stepping
  loop. The buffers live only in the outer loop, so the stepping loop carries small arrays alone
  (XLA's CPU runtime runs a loop body whose buffers are all small far faster: ~0.4 vs ~1 us a step).
  Each pass either steps *to* the next save time and records there exactly (Drake's ``AdvanceTo``
  semantics), or, with ``dense_output``, takes one step past it and interpolates every save time that
  step spans (up to `dense_window` of them a pass).

Imports: the framework (Context, errors), `loop_state`, `results`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import JaxsysError
from .loop_state import LoopState
from .loops import WhileLoop, Writes
from .results import STATUS_OK


Array = jax.Array

DENSE_WINDOW = 8  # with dense output, at most this many save times interpolated per pass of the saving loop


def dense_window(ts: Any, max_step: float | None) -> int:
    """How many save times one pass of the dense saving loop interpolates: as many as one step can
    span, ``ceil(max_step / smallest gap)`` when the save times are known while tracing, capped at
    `DENSE_WINDOW`. A slot costs its interpolation, record and predicated row write in every
    pass, used or not (about 1 us each on a CPU); saves a window misses are written by the next
    pass (which takes no step), so the window changes the speed, never the values."""
    n = int(np.shape(ts)[0])
    cap = max(1, min(DENSE_WINDOW, n))
    c_ts = concrete(ts)
    if c_ts is None or n < 2 or max_step is None or not np.isfinite(max_step):
        return cap
    gap = float(np.min(np.diff(c_ts)))
    if not gap > 0:
        return cap
    return int(min(cap, max(1, np.ceil(max_step / gap * (1 - 1e-9)))))


def concrete(x: Any) -> Any:
    """``x`` as a float64 NumPy array if its value is known while tracing, else None."""
    if isinstance(x, jax.core.Tracer):
        return None
    try:
        return np.asarray(x, dtype=np.float64).reshape(-1) if np.ndim(x) else np.asarray(x, dtype=np.float64)
    except Exception:  # noqa: BLE001
        return None


def check_save_times(save_at: Any, t_final: Any, t0: Any = None) -> None:
    """Eager checks of ``save_at``: a 1-D real array (its shape and dtype are always known), and
    where its values are known: finite, strictly increasing, within [t0, t_final]."""
    shape = tuple(np.shape(save_at))
    if len(shape) > 1:
        raise JaxsysError(
            f"simulate: save_at must be a 1-D array of times; got shape {shape} (use .reshape(-1) if you meant "
            f"its elements in order)."
        )
    try:
        dt = jnp.result_type(save_at)
    except TypeError as e:
        raise JaxsysError(f"simulate: save_at must be an array of times in seconds; got {save_at!r}.") from e
    if not (jnp.issubdtype(dt, jnp.floating) or jnp.issubdtype(dt, jnp.integer)):
        raise JaxsysError(f"simulate: save_at must hold real times in seconds; got dtype {jnp.dtype(dt).name}.")
    c_ts = concrete(save_at)
    c_tf = concrete(t_final)
    c_t0 = None if t0 is None else concrete(t0)
    if c_ts is None:
        return
    c_ts = np.atleast_1d(c_ts)
    if np.any(~np.isfinite(c_ts)):
        raise JaxsysError(f"simulate: save_at holds a non-finite time at index {int(np.argmin(np.isfinite(c_ts)))}.")
    if c_ts.size > 1 and np.any(np.diff(c_ts) <= 0):
        i = int(np.argmax(np.diff(c_ts) <= 0))
        raise JaxsysError(
            f"simulate: save_at must be strictly increasing; save_at[{i + 1}] = {c_ts[i + 1]} follows {c_ts[i]}."
        )
    if c_tf is not None and c_ts.size and c_ts[-1] > c_tf * (1 + 1e-12) + 1e-15:
        raise JaxsysError(f"simulate: save_at goes past t_final ({c_ts[-1]} > {c_tf}).")
    if c_t0 is not None and c_ts.size and c_ts[0] < c_t0 - 1e-12 * max(1.0, abs(float(c_t0))):
        raise JaxsysError(
            f"simulate: save_at[0] = {c_ts[0]} is before the context's time {float(c_t0)}: a run records from "
            f"its start on (a value before it does not exist)."
        )


def record_buffer(record: Callable[[Context], Any], context: Context, n: int) -> Any:
    """Zeros for ``n`` values of ``record(context)`` (its pytree with a leading axis ``n``)."""
    proto = record(context)
    return jax.tree_util.tree_map(lambda a: jnp.zeros((n,) + jnp.shape(a), jnp.result_type(a)), proto)


def write_row(buf: Any, k: Array, value: Any, hit: Array) -> Any:
    """``buf`` with row ``k`` set to ``value`` where ``hit`` (a plain array buffer, in a scan)."""

    def upd(b: Array, v: Array) -> Array:
        kk = jnp.clip(k, 0, b.shape[0] - 1)
        return b.at[kk].set(jnp.where(hit, v, b[kk]))

    if jax.tree_util.tree_leaves(buf) and jax.tree_util.tree_leaves(buf)[0].shape[0] == 0:
        return buf
    return jax.tree_util.tree_map(upd, buf, value)


def initial_saves(
    record: Callable[[Context], Any], context: Context, ts: Array, t0: Array, count: Array | None = None
) -> tuple[Array, Any]:
    """The buffers with the save times at or before the start filled with the start's value, and how
    many those are. ``count``: that number, when the caller counted it (the times known at the call;
    the save times are increasing, so they are the first ``count``)."""
    n = int(ts.shape[0])
    buf = record_buffer(record, context, n)
    hit0 = ts <= t0 if count is None else jnp.arange(n) < count
    first = record(context)
    buf = jax.tree_util.tree_map(lambda b, v: jnp.where(hit0.reshape((-1,) + (1,) * (b.ndim - 1)), v, b), buf, first)
    return (jnp.sum(hit0) if count is None else jnp.asarray(count)).astype(jnp.int32), buf


def run_with_saving(
    state: LoopState,
    ts: Array,
    t_final: Array,
    advance: Callable[[LoopState, Array], LoopState],
    running: Callable[[LoopState], Array],
    context_at: Callable[[LoopState, Array, Array], Context],
    record: Callable[[Context], Any],
    saves0: tuple[Array, Any],
    while_loop: WhileLoop,
    interpolate: Callable[..., Array] | None,
    window: int | None = None,
) -> tuple[LoopState, tuple[Array, Any]]:
    """The outer saving loop (see the module docstring): returns the final loop state and
    ``(number of saves written, buffers)``.

    ``advance(state, target)`` runs the stepping loop until time reaches ``target``; ``context_at``
    builds the context of a state at a time and continuous state; ``interpolate`` is the integrator's
    continuous extension for dense output (None: save by stepping to the save times); ``window``:
    the save times interpolated per pass (`dense_window`; None: as many as the save times
    allow, up to `DENSE_WINDOW`).
    """
    n_save = int(ts.shape[0])
    window = dense_window(ts, None) if window is None else max(1, min(window, n_save))

    def outer_body(oc: Any) -> Any:
        c, k = oc
        target = jnp.where(k < n_save, ts[jnp.clip(k, 0, n_save - 1)], t_final)
        if interpolate is not None:
            # The stepping loop overwrites the step it carries at its first step, and passes it through
            # when it takes none: entered without a derivative, kept from before by a select when no
            # step was taken (the same values), its packed states are not among the stepping loop's
            # inputs, so few scalars in keep it differentiated by its Jacobian (jaxsys.analysis.adjoint)
            before = c.dense.xs
            t_before = c.clock.t
            c = advance(c._replace(dense=c.dense._replace(xs=jax.lax.stop_gradient(before))), target)
            c = c._replace(dense=c.dense._replace(xs=_passed_through(c.dense.xs, before, c.clock.t > t_before)))
            k, writes = _dense_saves(c, k, ts, context_at, record, interpolate, window)
            return (c, k), writes
        c = advance(c, target)
        hit = (c.counters.status == STATUS_OK) & (k < n_save) & (c.clock.t >= target)
        value = record(context_at(c, c.clock.t, c.x))
        return (c, k + hit.astype(jnp.int32)), [(jnp.clip(k, 0, n_save - 1), value, hit)]

    def outer_cond(oc: Any) -> Array:
        c, k = oc
        return ((k < n_save) | (c.clock.t < t_final)) & running(c)

    k0, buf0 = saves0
    (c, k), buf = while_loop.with_writes(outer_cond, outer_body, (state, k0), buf0, n_save + 1)
    return c, (k, buf)


@jax.custom_jvp
def _passed_through(new: Array, before: Array, stepped: Array) -> Array:
    """``new``, which equals ``before`` where ``stepped`` is false, with ``before``'s derivative there
    (a select in the derivative only: evaluated, ``before`` need not be kept across the loop)."""
    return new


@_passed_through.defjvp
def _passed_through_jvp(primals: Any, tangents: Any) -> Any:
    new, before, stepped = primals
    d_new, d_before, _ = tangents
    return new, jnp.where(stepped, d_new, d_before)


def _dense_saves(
    c: LoopState,
    k: Array,
    ts: Array,
    context_at: Callable[[LoopState, Array, Array], Context],
    record: Callable[[Context], Any],
    interpolate: Callable[..., Array],
    window: int,
) -> tuple[Array, Writes]:
    """Every save time the last step spans, up to ``window`` of them, from its interpolant: the new
    save count and the row writes (one predicated write per slot: a scatter with dropped
    out-of-range rows would give NaN cotangents)."""
    n_save = int(ts.shape[0])
    t = c.clock.t
    step = c.dense
    n = int(c.x.shape[0])
    x_a, x_b, data = step.states(n)
    ok = c.counters.status == STATUS_OK
    h_a = step.h
    n_hit = jnp.zeros((), jnp.int32)
    writes: Writes = []
    for j in range(window):
        row = jnp.clip(k + j, 0, n_save - 1)
        t_j = ts[row]
        hit = ok & (k + j < n_save) & (t_j <= t)
        theta = jnp.clip(jnp.where(h_a > 0, (t_j - step.t) / jnp.where(h_a > 0, h_a, 1.0), 1.0), 0.0, 1.0)
        # (the end point itself exactly)
        x_j = x_b if data is None else jnp.where(t_j >= t, x_b, interpolate(x_a, x_b, h_a, data, theta))
        writes.append((row, record(context_at(c, t_j, x_j)), hit))
        n_hit = n_hit + hit.astype(jnp.int32)
    return k + n_hit, writes
