"""Explicit Runge-Kutta integrators, each one Butcher tableau on a shared stepping routine.

Euler, Heun (RK2), Kutta's RK3 (Drake's default), Bogacki-Shampine 3(2), the classic RK4 and
Dormand-Prince 5(4). Bogacki-Shampine and Dormand-Prince reuse their last stage as the next step's
first ("first same as last"); every method has a continuous extension for ``dense_output``
(Dormand-Prince's own 4th-order interpolant, cubic Hermite for the others).

Imports: `base` only.
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .base import Array, IntegratorBase, StepResult, VectorField


class FsalState(eqx.Module):
    """The state a first-same-as-last method carries: ``k`` = f(t, x) at the current point and whether
    it is still ``valid`` (updates at a step's start that change the state or the dynamics, and a step
    cut short at a witness crossing, make it stale). ``checked`` (static): the loop may make it stale, so
    each step tests ``valid`` (and evaluates the stage when it is not); otherwise it is always valid."""

    k: Array
    valid: Array
    checked: bool = eqx.field(static=True, default=False)


class FsalProposal(eqx.Module):
    """A first-same-as-last attempt's proposal: the end-point derivative ``k_end`` (the next step's
    first stage if the step is accepted whole) and the first stage ``k_first`` it used (kept if
    rejected)."""

    k_end: Array
    k_first: Array
    checked: bool = eqx.field(static=True, default=False)


def _rolled(aux: Any) -> bool:
    return bool(aux is not None and aux.get("rolled", False))


class _ExplicitRK(IntegratorBase):
    """Explicit Runge-Kutta from a Butcher tableau; optional embedded error weights."""

    A: ClassVar[tuple[tuple[float, ...], ...]] = ()
    b: ClassVar[tuple[float, ...]] = ()
    c: ClassVar[tuple[float, ...]] = ()
    b_err: ClassVar[tuple[float, ...] | None] = None  # x_err = h * sum (b - b_hat) k
    dense_output_kind: ClassVar[str | None] = "hermite"

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        x_new, err, ok, _ = self._stages(f, t, x, h, aux, None, None)
        return x_new, err, ok

    # ----- the integrator protocol ---------------------------------------------------------------
    def init(self, f: VectorField, t: Array, x: Array, aux: Any, events: bool = False) -> tuple[Any, int]:
        """First same as last: f(t, x), evaluated here when nothing can make it stale (no events, stages
        not rolled); otherwise the first step evaluates it (inside its stage loop when rolled)."""
        if not self.uses_fsal():
            return (), 0
        if events or _rolled(aux):
            return FsalState(jnp.zeros_like(x), jnp.array(False), checked=True), 0
        return FsalState(f(t, x), jnp.array(True)), 1

    def step(
        self,
        f: VectorField,
        t: Array,
        x: Array,
        h: Array,
        aux: Any,
        state: Any,
        t_end: Array,
        dense: bool = False,
    ) -> StepResult:
        n = self.num_evaluations()
        if self.uses_fsal():
            if state.checked:
                x_new, err, ok, k_end, interp, k1 = self._reusing_step(
                    f, t, x, h, aux, state.k, state.valid, t_end, dense
                )
                evals: Any = (n - 1) + (~state.valid).astype(jnp.int32)
            else:
                k1, evals = state.k, n - 1
                x_new, err, ok, k_end, interp = self._from_first_stage(f, t, x, h, aux, k1, t_end, dense)
            return StepResult(x_new, err, ok, FsalProposal(k_end, k1, state.checked), evals, interp, k1)
        if dense:
            x_new, err, ok, _, interp = self._dense_step(f, t, x, h, aux, None, t_end)
            # (cubic Hermite evaluates f at the end point)
            return StepResult(x_new, err, ok, (), n + int(self.dense is None), interp)
        x_new, err, ok = self.attempt_step(f, t, x, h, aux)
        return StepResult(x_new, err, ok, (), n)

    def next_state(self, proposal: Any, accepted: Array, cut: Array) -> Any:
        """The end-point derivative starts the next step; a rejected step keeps the start's; a step cut
        short at a witness crossing has neither (stale)."""
        if not self.uses_fsal():
            return proposal
        k = jnp.where(accepted, proposal.k_end, proposal.k_first)
        return FsalState(k, ~(accepted & cut), checked=proposal.checked)

    def refresh(self, state: Any, changed: Array) -> Any:
        if not self.uses_fsal():
            return state
        return FsalState(state.k, state.valid & ~changed, checked=state.checked)

    def uses_fsal(self) -> bool:
        """True for a tableau whose last row of A is b (and c = 1), when the ``fsal`` option is on."""
        s = len(self.c)
        return (
            self.fsal and s > 1 and self.c[-1] == 1.0 and self.b[-1] == 0.0 and tuple(self.A[-1]) == tuple(self.b[:-1])
        )

    def _fsal_step(
        self, f: VectorField, t: Array, x: Array, h: Array, aux: Any, k_first: Array, t_end: Array
    ) -> tuple[Array, Array, Array, Array]:
        return self._stages(f, t, x, h, aux, k_first, t_end)

    def _from_first_stage(
        self, f: VectorField, t: Array, x: Array, h: Array, aux: Any, k1: Array, t_end: Array, dense: bool
    ) -> tuple[Array, Array, Array, Array, Array | None]:
        """A first-same-as-last step from its given first stage: (x_new, err, ok, f(t_end, x_new), the
        interpolation data when ``dense`` else None)."""
        if dense:
            return self._dense_step(f, t, x, h, aux, k1, t_end)
        return self._fsal_step(f, t, x, h, aux, k1, t_end) + (None,)

    def _reusing_step(
        self,
        f: VectorField,
        t: Array,
        x: Array,
        h: Array,
        aux: Any,
        k_first: Array,
        k_valid: Array,
        t_end: Array,
        dense: bool,
    ) -> tuple[Array, Array, Array, Array, Array | None, Array]:
        """A first-same-as-last step whose carried first stage may be stale (``k_valid`` False: the
        run's start, or an update changed the state or the dynamics): then the first stage is
        evaluated here. In a rolled step (large diagrams) that evaluation is the stage loop's own, so
        the vector field is traced once per step, not twice.

        Returns (x_new, err, ok, f(t_end, x_new), the interpolation data when ``dense`` else None,
        the first stage used)."""
        if not _rolled(aux):
            k1 = jax.lax.cond(k_valid, lambda: k_first, lambda: f(t, x))
            return self._from_first_stage(f, t, x, h, aux, k1, t_end, dense) + (k1,)
        x_new, err, ok, K = self._stages_rolled(f, t, x, h, k_first, t_end, k_valid)
        k_end = K[len(self.c) - 1]
        data = self._interpolation_data(K, k_end) if dense else None
        return x_new, err, ok, k_end, data, K[0]

    # Dense output: coefficients of a polynomial continuous extension in theta, per stage (rows:
    # powers theta^1..theta^p); None = cubic Hermite through (x, f(t, x)) and (x_new, f(t + h, x_new)).
    dense: ClassVar[tuple[tuple[float, ...], ...] | None] = None

    def _dense_step(
        self, f: VectorField, t: Array, x: Array, h: Array, aux: Any, k_first: Array | None, t_end: Array
    ) -> tuple[Array, Array, Array, Array, Array]:
        x_new, err, ok, K = self._stages(f, t, x, h, aux, k_first, t_end, all_stages=True)
        s = len(self.c)
        # (cubic Hermite needs f at the end: the last stage of first-same-as-last methods)
        f1 = K[s - 1] if self.dense is not None or self.uses_fsal() else f(t_end, x_new)
        return x_new, err, ok, f1, self._interpolation_data(K, f1)

    def _interpolation_data(self, K: Array, f1: Array) -> Array:
        """What `interpolate` reads of a step: all stages for a method with its own continuous
        extension, else f at both ends (cubic Hermite)."""
        return K if self.dense is not None else jnp.stack([K[0], f1])

    def interpolate(self, x: Array, x_new: Array, h: Array, data: Array, theta: Array) -> Array:
        if self.dense is not None:
            D = np.asarray(self.dense)  # (powers, stages): x + h sum_p theta^p (D @ K)[p-1]
            # (products and sums, not pow and dots: on a CPU a dot is a library call of its own, and
            # a save's interpolation cost 1.2 us against 0.6 us for a stepped save's record)
            powers = [theta]
            for _ in range(D.shape[0] - 1):
                powers.append(powers[-1] * theta)
            w = [sum(p * float(d) for p, d in zip(powers, D[:, j]) if d != 0.0) for j in range(D.shape[1])]
            return x + h * sum(wj * data[j] for j, wj in enumerate(w) if not isinstance(wj, int))
        f0, f1 = data[0], data[1]
        t2, t3 = theta * theta, theta * theta * theta
        return (
            (2 * t3 - 3 * t2 + 1) * x + (t3 - 2 * t2 + theta) * h * f0 + (-2 * t3 + 3 * t2) * x_new + (t3 - t2) * h * f1
        )

    def _stages(
        self,
        f: VectorField,
        t: Array,
        x: Array,
        h: Array,
        aux: Any,
        k_first: Array | None,
        t_end: Array | None,
        all_stages: bool = False,
    ) -> tuple[Array, Array, Array, Array]:
        """The Runge-Kutta stages; with ``k_first`` the first stage is given, and with ``t_end`` the
        last is evaluated at ``t_end`` (first same as last). Returns (x_new, err, ok, last stage, or
        all stages stacked when ``all_stages``)."""
        if aux is not None and aux.get("rolled", False) and len(self.c) > 1:
            out = self._stages_rolled(f, t, x, h, k_first, t_end)
            return out if all_stages else out[:3] + (out[3][-1],)
        s = len(self.c)
        ks: list[Array] = []
        for i, ci in enumerate(self.c):
            if i == 0 and k_first is not None:
                ks.append(k_first)
                continue
            xi = x
            for j, aij in enumerate(self.A[i]):
                if aij != 0.0:
                    xi = xi + (h * aij) * ks[j]
            ti = t_end if (t_end is not None and i == s - 1 and self.uses_fsal()) else t + ci * h
            ks.append(f(ti, xi))
        x_new = x
        for bi, ki in zip(self.b, ks):
            if bi != 0.0:
                x_new = x_new + (h * bi) * ki
        err = jnp.zeros_like(x)
        if self.b_err is not None:
            for ei, ki in zip(self.b_err, ks):
                if ei != 0.0:
                    err = err + (h * ei) * ki
        return x_new, err, jnp.array(True), (jnp.stack(ks) if all_stages else ks[-1])

    def _stages_rolled(
        self,
        f: VectorField,
        t: Array,
        x: Array,
        h: Array,
        k_first: Array | None,
        t_end: Array | None,
        k_valid: Array | None = None,
    ) -> tuple[Array, Array, Array, Array]:
        """The same step with the stages in a loop: one traced copy of ``f`` (for large diagrams,
        where compile time, not the loop overhead, dominates). With ``k_valid``, ``k_first`` is used
        only where it is valid; otherwise the loop's first pass evaluates it."""
        s = len(self.c)
        A = np.zeros((s, s))
        for i, row in enumerate(self.A):
            A[i, : len(row)] = row
        A_ = jnp.asarray(A, x.dtype)
        times = t + jnp.asarray(self.c, x.dtype) * h
        if t_end is not None and self.uses_fsal():
            times = times.at[s - 1].set(t_end)

        def stage(i: Array, K: Array) -> Array:
            xi = x + h * (A_[i] @ K)
            return K.at[i].set(f(times[i], xi))

        K0 = jnp.zeros((s,) + x.shape, x.dtype)
        if k_first is not None and k_valid is not None:

            def stage_or_reuse(i: Array, K: Array) -> Array:
                xi = x + h * (A_[i] @ K)
                ki = jax.lax.cond((i == 0) & k_valid, lambda: K[0], lambda: f(times[i], xi))
                return K.at[i].set(ki)

            K = jax.lax.fori_loop(0, s, stage_or_reuse, K0.at[0].set(k_first))
        elif k_first is not None:
            K = jax.lax.fori_loop(1, s, stage, K0.at[0].set(k_first))
        else:
            K = jax.lax.fori_loop(0, s, stage, K0)
        x_new = x + h * (jnp.asarray(self.b, x.dtype) @ K)
        err = jnp.zeros_like(x) if self.b_err is None else h * (jnp.asarray(self.b_err, x.dtype) @ K)
        return x_new, err, jnp.array(True), K


class ExplicitEulerIntegrator(_ExplicitRK):
    """Forward Euler, first order, fixed step (Drake's ``ExplicitEulerIntegrator``)."""

    name: ClassVar[str] = "explicit_euler"
    order: ClassVar[int] = 1
    num_stages: ClassVar[int] = 1
    A: ClassVar = ((),)
    b: ClassVar = (1.0,)
    c: ClassVar = (0.0,)


class RungeKutta2Integrator(_ExplicitRK):
    """Heun's second-order method (explicit trapezoid), fixed step (Drake's ``RungeKutta2Integrator``)."""

    name: ClassVar[str] = "runge_kutta2"
    order: ClassVar[int] = 2
    num_stages: ClassVar[int] = 2
    A: ClassVar = ((), (1.0,))
    b: ClassVar = (0.5, 0.5)
    c: ClassVar = (0.0, 1.0)


class RungeKutta3Integrator(_ExplicitRK):
    """Kutta's third-order method with a midpoint (2nd order) error estimate, 3 evaluations a step.

    Drake's ``RungeKutta3Integrator`` (its default integrator, error controlled).
    """

    name: ClassVar[str] = "runge_kutta3"
    order: ClassVar[int] = 3
    error_estimate_order: ClassVar[int] = 3
    num_stages: ClassVar[int] = 3
    A: ClassVar = ((), (0.5,), (-1.0, 2.0))
    b: ClassVar = (1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0)
    c: ClassVar = (0.0, 0.5, 1.0)
    b_err: ClassVar = (1.0 / 6.0, 2.0 / 3.0 - 1.0, 1.0 / 6.0)


class BogackiShampine3Integrator(_ExplicitRK):
    """Bogacki-Shampine 3(2) (Drake's ``BogackiShampine3Integrator``): 4 stages, of which the last is
    the first of the next step (3 evaluations an attempt with ``fsal=True``, the default; Drake's 4
    with ``fsal=False``)."""

    name: ClassVar[str] = "bogacki_shampine3"
    order: ClassVar[int] = 3
    error_estimate_order: ClassVar[int] = 3
    num_stages: ClassVar[int] = 4
    A: ClassVar = ((), (0.5,), (0.0, 0.75), (2.0 / 9.0, 1.0 / 3.0, 4.0 / 9.0))
    b: ClassVar = (2.0 / 9.0, 1.0 / 3.0, 4.0 / 9.0, 0.0)
    c: ClassVar = (0.0, 0.5, 0.75, 1.0)
    b_err: ClassVar = (2.0 / 9.0 - 7.0 / 24.0, 1.0 / 3.0 - 0.25, 4.0 / 9.0 - 1.0 / 3.0, -0.125)


class RungeKutta4Integrator(_ExplicitRK):
    """The classic fourth-order Runge-Kutta method, fixed step (no Drake counterpart)."""

    name: ClassVar[str] = "runge_kutta4"
    order: ClassVar[int] = 4
    num_stages: ClassVar[int] = 4
    A: ClassVar = ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0))
    b: ClassVar = (1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0)
    c: ClassVar = (0.0, 0.5, 0.5, 1.0)


_DP_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_DP_BHAT = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)


def _dopri_dense() -> tuple[tuple[float, ...], ...]:
    """Dormand-Prince's fourth-order continuous extension (Hairer, Norsett & Wanner, Solving ODEs I,
    sec. II.6), written as x(theta) = x + h sum_p theta^p sum_i D[p-1][i] k_i.

    Built from the Hermite-like form  y0 + th (r2 + (1 - th)(r3 + th (r4 + (1 - th) r5)))  with
    r2 = y1 - y0, r3 = h k1 - r2, r4 = r2 - h k7 - r3, r5 = h sum d_i k_i.
    """
    d = np.array(
        [
            -12715105075 / 11282082432,
            0.0,
            87487479700 / 32700410799,
            -10690763975 / 1880347072,
            701980252875 / 199316789632,
            -1453857185 / 822651844,
            69997945 / 29380423,
        ]
    )
    b = np.array(_DP_B)
    e1, e7 = np.eye(7)[0], np.eye(7)[6]
    r2 = b  # (y1 - y0) / h
    r3 = e1 - r2
    r4 = r2 - e7 - r3
    r5 = d
    # th r2 + th (1-th) r3 + th^2 (1-th) r4 + th^2 (1-th)^2 r5, expanded in powers of th
    p1 = r2 + r3
    p2 = -r3 + r4 + r5
    p3 = -r4 - 2 * r5
    p4 = r5
    return tuple(tuple(float(v) for v in row) for row in (p1, p2, p3, p4))


_DP_DENSE = _dopri_dense()


class RungeKutta5Integrator(_ExplicitRK):
    """Dormand-Prince 5(4) (Drake's ``RungeKutta5Integrator``): 7 stages, of which the last is the
    first of the next step (6 evaluations an attempt with ``fsal=True``, the default; Drake's 7 with
    ``fsal=False``). Same steps and results either way."""

    name: ClassVar[str] = "runge_kutta5"
    order: ClassVar[int] = 5
    error_estimate_order: ClassVar[int] = 5
    default_accuracy: ClassVar[float] = 1e-5  # Drake's RK5 defaults
    loosest_accuracy: ClassVar[float] = 1e-3
    num_stages: ClassVar[int] = 7
    A: ClassVar = (
        (),
        (1 / 5,),
        (3 / 40, 9 / 40),
        (44 / 45, -56 / 15, 32 / 9),
        (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
        (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
        (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
    )
    b: ClassVar = _DP_B
    c: ClassVar = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
    dense: ClassVar = _DP_DENSE
    dense_output_kind: ClassVar[str | None] = "own"
    b_err: ClassVar = tuple(a - b for a, b in zip(_DP_B, _DP_BHAT))
