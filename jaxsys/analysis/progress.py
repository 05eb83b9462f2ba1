"""Progress meters for long simulations (host callbacks from inside the compiled loop).

``simulate(..., progress_meter=TqdmProgressMeter())`` shows a tqdm bar of simulated time; the
default [`NoProgressMeter`][jaxsys.NoProgressMeter] adds nothing to the loop. The meter is updated every
``refresh_steps`` steps through ``jax.debug.callback``, so it works in a plain call and under ``jit``,
``vmap`` and ``grad`` (callbacks do not affect derivatives).

Under ``vmap`` (``batch_simulate`` included) the callbacks are not batched: a custom batching rule
reduces the batch first, over the members **still running** (a member that has finished, or is
waiting at a save time for the others, is left out), so a batch has one bar, at the simulated time of
its least advanced running member, refreshed every ``refresh_steps`` steps of that member, and
compiles as one call whatever the batch size. Members with different final times keep the bar moving
until the last one finishes (the bar's total is the longest member's span).

Callbacks are unordered (JAX's ``jax.debug.callback``); the host side only ever moves the bar forward,
ignores what arrives for a bar already closed, and draws a run whose close arrived before its start
finished, so the bar never goes back, prints its final line once and never stays open. Reverse mode
re-runs the loop's steps after the forward run has closed its bar: those replays draw nothing.

Imports: nothing from jaxsys.
"""

from __future__ import annotations

import functools
import itertools
import threading
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


_bars: dict[int, Any] = {}
_closed_early: dict[int, float] = {}  # runs whose close arrived before their start: the end time


def _batch_reduced(fn: Any, reducers: tuple[Any, ...]) -> Any:
    """``fn(*args)`` (side effects only) as a function whose batching rule reduces each batched
    argument with its reducer (e.g. ``jnp.min``) and calls ``fn`` once, so that under ``vmap`` a host
    callback runs once per step for the whole batch, not once per member. Arguments are cut from
    differentiation (a progress display has no derivative)."""

    @jax.custom_batching.custom_vmap
    def call(*args: Any) -> Any:
        fn(*args)
        return jnp.zeros((), jnp.int32)

    @call.def_vmap
    def rule(axis_size: int, in_batched: Any, *args: Any) -> Any:
        reduced = [r(a) if b else a for r, a, b in zip(reducers, args, in_batched)]
        return call(*reduced), False

    def wrapped(*args: Any) -> None:
        call(*(jax.lax.stop_gradient(a) for a in args))

    return wrapped


def _running_min(x: jax.Array, active: jax.Array) -> jax.Array:
    """``x`` itself, except under ``vmap``, where it is the minimum over the members still running
    (``active``; an unbatched value): the least advanced running member's step count or time. A
    throttling test on it is an unbatched predicate: ``lax.cond`` stays a conditional and skips the
    callback's branch, rather than becoming a select that runs the branch every step. (The minimum
    over *all* members froze once the shortest member finished: the bar then stopped, or redrew every
    step if the frozen count was a multiple of the refresh.) With no member running (the body of a
    batched loop runs only while one is) it is the dtype's largest value."""

    @jax.custom_batching.custom_vmap
    def call(a: jax.Array, on: jax.Array) -> jax.Array:
        return a

    @call.def_vmap
    def rule(axis_size: int, in_batched: Any, a: jax.Array, on: jax.Array) -> Any:
        if in_batched[0]:
            on_b = on if in_batched[1] else jnp.broadcast_to(on, a.shape)
            big = jnp.iinfo(a.dtype).max if jnp.issubdtype(a.dtype, jnp.integer) else jnp.inf
            a = jnp.min(jnp.where(on_b, a, jnp.asarray(big, a.dtype)), axis=0)
        return call(a, jnp.any(on, axis=0) if in_batched[1] else on), False

    return call(jax.lax.stop_gradient(x), jax.lax.stop_gradient(jnp.asarray(active)))


_lock = threading.Lock()
_ids = itertools.count()


class AbstractProgressMeter(eqx.Module):
    """Base class: ``start(t0, t_final)`` before the loop, ``update(token, t, step, active)`` in it,
    ``close(token, t)`` after. Subclass it for another display (a notebook widget, a log line)."""

    def start(self, t0: jax.Array, t_final: jax.Array) -> Any:
        """Called before the loop; returns a token threaded to ``update`` and ``close``."""
        return None

    def update(self, token: Any, t: jax.Array, step: jax.Array, active: jax.Array) -> None:
        """Called every step attempt inside the loop (implementations throttle themselves).

        - `t`: the simulated time at the start of the attempt (s).
        - `step`: the number of attempts so far (int32).
        - `active`: whether this run is still stepping (bool). Under ``vmap`` the loop body runs for
          every member while any member runs; a member that has finished (or waits at a save time for
          the others) has ``active`` false and its ``t`` and ``step`` frozen, and should be left out of
          what is displayed.
        """

    def close(self, token: Any, t: jax.Array) -> None:
        """Called after the loop with the final time."""


class NoProgressMeter(AbstractProgressMeter):
    """No progress display (the default; costs nothing)."""


class TqdmProgressMeter(AbstractProgressMeter):
    """A tqdm bar of simulated time, refreshed every ``refresh_steps`` steps (needs ``tqdm``).

    **Cost.** A refresh is a host callback from the compiled loop, about 0.1 ms on a CPU whatever
    the bar does (the bar itself redraws at most every ``mininterval`` of tqdm); between refreshes a
    step pays one integer comparison. The meter's share of a run is therefore about
    0.1 ms / (``refresh_steps`` x the time of one step): under 5 % from 2 us a step at the default
    1000 (a batch of a thousand small systems, or one system of a few hundred states), but most of
    the run for a tiny system (a pendulum step is ~0.15 us: use ``refresh_steps=100_000`` there). Off
    (the default of ``simulate``), it costs nothing.
    """

    refresh_steps: int = eqx.field(static=True, default=1000)

    def start(self, t0: jax.Array, t_final: jax.Array) -> Any:
        try:
            import tqdm  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("TqdmProgressMeter needs tqdm: pip install tqdm") from e
        key = next(_ids)
        _batch_reduced(lambda a, b: jax.debug.callback(functools.partial(_host_start, key), a, b), (jnp.min, jnp.max))(
            t0, t_final
        )
        return key

    def update(self, token: Any, t: jax.Array, step: jax.Array, active: jax.Array) -> None:
        def _update(t_: Any) -> None:
            with _lock:
                bar = _bars.get(token)
                if bar is not None:
                    # forward only (callbacks are unordered); tqdm's update redraws at most every
                    # ``mininterval`` seconds of wall time (a redraw costs far more than the callback)
                    delta = float(np.max(t_)) - bar.t0 - bar.n
                    if np.isfinite(delta) and delta > 0:
                        bar.update(delta)

        # the throttle first, on the step count (the least advanced running member's under vmap):
        # between refreshes a step pays one comparison and a skipped conditional
        # (under vmap some member runs whenever the body does: the minimum is never the placeholder)
        due = _running_min(jnp.asarray(step), active) % self.refresh_steps == 0
        jax.lax.cond(due, lambda: jax.debug.callback(_update, _running_min(t, active)), lambda: None)

    def close(self, token: Any, t: jax.Array) -> None:
        _batch_reduced(lambda a: jax.debug.callback(functools.partial(_host_close, token), a), (jnp.max,))(t)


def _host_start(key: int, t0_: Any, tf_: Any) -> None:
    """The host side of `TqdmProgressMeter.start`: a new bar for run ``key`` (closing a bar left open by
    an earlier run of the same program); if that run's close came first (callbacks are unordered: XLA
    may run them in either order), the bar is drawn finished at once."""
    import tqdm

    with _lock:
        old = _bars.pop(key, None)
        if old is not None:
            old.close()
        total = float(np.max(tf_) - np.min(t0_))
        bar = tqdm.tqdm(total=total, unit="s(sim)", bar_format="{l_bar}{bar}| {n:.3g}/{total:.3g} s")
        bar.t0 = float(np.min(t0_))
        end = _closed_early.pop(key, None)
        if end is None:
            _bars[key] = bar
        else:
            bar.n = max(0.0, end - bar.t0)
            bar.close()


def _host_close(key: int, t_: Any) -> None:
    """The host side of `TqdmProgressMeter.close`: the bar of run ``key`` moved to where the runs ended
    (the last member's end under vmap) and closed (``close`` draws the final line once: a refresh before
    it printed the 100 % line twice); before its start, the end is kept for the start to draw."""
    with _lock:
        bar = _bars.pop(key, None)
        if bar is None:
            _closed_early[key] = float(np.max(t_))
        else:
            bar.n = max(float(bar.n), float(np.max(t_)) - bar.t0)
            bar.close()


__all__ = ["AbstractProgressMeter", "NoProgressMeter", "TqdmProgressMeter"]
