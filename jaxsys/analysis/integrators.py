"""Integrators with Drake's ``IntegratorBase`` options and semantics.

Each integrator is an immutable ``equinox.Module`` holding its options (Drake's setters become
constructor arguments; ``with_options(...)`` returns a modified copy). The stepping function is pure:
``attempt_step(f, t, x, h) -> (x_new, error_estimate, ok)`` where ``f(t, x) -> xdot``. The
simulation loop (:mod:`jaxsys.analysis.simulator`) applies Drake's error control
(``StepOnceErrorControlledAtMost`` / ``CalcAdjustedStepSize``), its step truncation at boundaries
with the stretch factor, and records Drake's statistics.

| jaxsys | Drake | order | error estimate (order of its local term) |
|---|---|---|---|
| ExplicitEulerIntegrator | ExplicitEulerIntegrator | 1 | none (fixed step) |
| SemiExplicitEulerIntegrator | SemiExplicitEulerIntegrator | 1 | none (fixed step) |
| RungeKutta2Integrator | RungeKutta2Integrator | 2 | none (fixed step) |
| RungeKutta3Integrator | RungeKutta3Integrator | 3 | Kutta 3 vs midpoint (3) |
| BogackiShampine3Integrator | BogackiShampine3Integrator | 3 | embedded 2nd order (3) |
| RungeKutta4Integrator | (none in Drake) | 4 | none (fixed step) |
| RungeKutta5Integrator | RungeKutta5Integrator | 5 | Dormand-Prince 4th order (5) |
| ImplicitEulerIntegrator | ImplicitEulerIntegrator | 1 | vs implicit trapezoid (2) |
| RadauIntegrator | RadauIntegrator<T, 2> | 3 | vs trapezoid on the Radau end point (3) |

Difference from Drake, by choice: Bogacki-Shampine and Dormand-Prince reuse the derivative at the end
of an accepted step as the first stage of the next ("first same as last"), which Drake re-evaluates.
The steps and results are identical; ``num_derivative_evaluations`` is one lower per attempt (plus
one at the start and one after each event that changes the state or the dynamics). Pass
``fsal=False`` to count as Drake does.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..framework.errors import JaxsysError


Array = jax.Array
VectorField = Callable[[Array, Array], Array]


class IntegratorBase(eqx.Module):
    """Options shared by all integrators (Drake's ``IntegratorBase``).

    **Arguments** (all keyword; Drake's setter in brackets):
    - `max_step_size`: largest step, s (``set_maximum_step_size``). In fixed-step mode, the step.
    - `target_accuracy`: error-control accuracy (``set_target_accuracy``); None = Drake's default
      (1e-3 if the integrator supports error estimation... overridden by ``fixed_step_mode``).
    - `fixed_step_mode`: take steps of exactly ``max_step_size`` (``set_fixed_step_mode``);
      forced True for integrators without error estimation.
    - `requested_minimum_step_size`: h_min, s (``set_requested_minimum_step_size``).
    - `throw_on_minimum_step_size_violation`: error if error control wants a step below h_min.
    - `initial_step_size_target`: first step to attempt (``request_initial_step_size_target``);
      None = Drake's default, 1/10 of ``max_step_size``.
    - `stretch_factor`: a step may be stretched by this factor to land on a boundary instead of
      leaving a sliver (``get_stretch_factor``; Drake's 1.01).
    - `qbar_weight`, `z_weight`: weights of the generalized (v) and misc (z) state in the
      weighted infinity-norm error measure (``get_generalized_state_weight_vector``, ...);
      None = all ones.
    - `max_steps`: bound on step attempts in one ``simulate`` call (jaxsys-specific; exceeding it is
      an error, never a silent stop).
    - `fsal`: for methods whose last stage is the derivative at the step's end point (Dormand-Prince,
      Bogacki-Shampine: "first same as last"), reuse it as the next step's first stage, saving one
      derivative evaluation per step attempt. Steps and results are those of Drake (which
      re-evaluates it); only ``num_derivative_evaluations`` differs. ``fsal=False`` evaluates as Drake
      does (jaxsys-specific; ignored by other methods).
    """

    max_step_size: float = eqx.field(static=True, default=0.1)
    target_accuracy: float | None = eqx.field(static=True, default=None)
    fixed_step_mode: bool = eqx.field(static=True, default=False)
    requested_minimum_step_size: float = eqx.field(static=True, default=0.0)
    throw_on_minimum_step_size_violation: bool = eqx.field(static=True, default=True)
    initial_step_size_target: float | None = eqx.field(static=True, default=None)
    stretch_factor: float = eqx.field(static=True, default=1.01)
    qbar_weight: tuple[float, ...] | None = eqx.field(static=True, default=None)
    z_weight: tuple[float, ...] | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=1_000_000)
    fsal: bool = eqx.field(static=True, default=True)

    name: ClassVar[str] = "integrator"
    order: ClassVar[int] = 1
    error_estimate_order: ClassVar[int] = 0
    num_stages: ClassVar[int] = 1  # derivative evaluations per attempted step

    def __check_init__(self) -> None:
        if not self.max_step_size > 0:
            raise JaxsysError(f"{type(self).__name__}: max_step_size must be > 0; got {self.max_step_size}.")
        if self.target_accuracy is not None and not self.target_accuracy > 0:
            raise JaxsysError(f"{type(self).__name__}: target_accuracy must be > 0; got {self.target_accuracy}.")
        if self.stretch_factor < 1:
            raise JaxsysError(f"{type(self).__name__}: stretch_factor must be >= 1.")

    # ----- Drake-style queries -------------------------------------------------------------
    def supports_error_estimation(self) -> bool:
        """Whether this integrator estimates its error (Drake: ``supports_error_estimation``)."""
        return self.error_estimate_order > 0

    def get_error_estimate_order(self) -> int:
        """Order of the asymptotic term of the error estimate; 0 if none (Drake: same name)."""
        return self.error_estimate_order

    def get_fixed_step_mode(self) -> bool:
        """True if steps are of fixed size (always, without error estimation)."""
        return self.fixed_step_mode or not self.supports_error_estimation()

    def get_maximum_step_size(self) -> float:
        """Drake: ``get_maximum_step_size``."""
        return self.max_step_size

    def get_target_accuracy(self) -> float | None:
        """Drake: ``get_target_accuracy``."""
        return self.target_accuracy

    def get_accuracy_in_use(self) -> float:
        """The accuracy error control uses: the target, else Drake's default 1e-3 (``get_accuracy_in_use``)."""
        return 1e-3 if self.target_accuracy is None else float(self.target_accuracy)

    def get_initial_step_size_target(self) -> float:
        """First step to attempt (Drake: ``get_initial_step_size_target``)."""
        if self.initial_step_size_target is not None:
            return float(self.initial_step_size_target)
        return 0.1 * self.max_step_size

    def get_stretch_factor(self) -> float:
        """Drake: ``get_stretch_factor``."""
        return self.stretch_factor

    def get_requested_minimum_step_size(self) -> float:
        """Drake: ``get_requested_minimum_step_size``."""
        return self.requested_minimum_step_size

    def get_throw_on_minimum_step_size_violation(self) -> bool:
        """Drake: ``get_throw_on_minimum_step_size_violation``."""
        return self.throw_on_minimum_step_size_violation

    def with_options(self, **changes: Any) -> IntegratorBase:
        """A copy with some options changed (the functional form of Drake's setters)."""
        return dataclasses.replace(self, **changes)

    # ----- the method ----------------------------------------------------------------------
    @abc.abstractmethod
    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        """One step of size ``h`` from (t, x): returns (x_new, error estimate vector, ok)."""

    def num_evaluations(self) -> int:
        """Derivative evaluations in one attempted step (without first-same-as-last reuse)."""
        return self.num_stages

    def uses_fsal(self) -> bool:
        """Whether steps reuse the end-point derivative of the previous step ("first same as last"):
        the method has the property and the ``fsal`` option is on. A class that returns True provides
        ``attempt_step_fsal(f, t, x, h, aux, k_first, t_end) -> (x_new, err, ok, f(t_end, x_new))``
        (explicit Runge-Kutta methods do)."""
        return False

    def supports_dense_output(self) -> bool:
        """Whether the method has a continuous extension of its steps. A class that returns True
        provides ``attempt_step_dense`` (a step and its interpolation data) and ``interpolate``
        (explicit Runge-Kutta methods do)."""
        return False


# --------------------------------------------------------------------------------------------
class _ExplicitRK(IntegratorBase):
    """Explicit Runge-Kutta from a Butcher tableau; optional embedded error weights."""

    A: ClassVar[tuple[tuple[float, ...], ...]] = ()
    b: ClassVar[tuple[float, ...]] = ()
    c: ClassVar[tuple[float, ...]] = ()
    b_err: ClassVar[tuple[float, ...] | None] = None  # x_err = h * sum (b - b_hat) k

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        x_new, err, ok, _ = self._stages(f, t, x, h, aux, None, None)
        return x_new, err, ok

    def uses_fsal(self) -> bool:
        """True for a tableau whose last row of A is b (and c = 1), when the ``fsal`` option is on."""
        s = len(self.c)
        return (
            self.fsal and s > 1 and self.c[-1] == 1.0 and self.b[-1] == 0.0 and tuple(self.A[-1]) == tuple(self.b[:-1])
        )

    def attempt_step_fsal(
        self, f: VectorField, t: Array, x: Array, h: Array, aux: Any, k_first: Array, t_end: Array
    ) -> tuple[Array, Array, Array, Array]:
        return self._stages(f, t, x, h, aux, k_first, t_end)

    # Dense output: coefficients of a polynomial continuous extension in theta, per stage (rows:
    # powers theta^1..theta^p); None = cubic Hermite through (x, f(t, x)) and (x_new, f(t + h, x_new)).
    dense: ClassVar[tuple[tuple[float, ...], ...] | None] = None

    def supports_dense_output(self) -> bool:
        return True

    def attempt_step_dense(
        self, f: VectorField, t: Array, x: Array, h: Array, aux: Any, k_first: Array | None, t_end: Array
    ) -> tuple[Array, Array, Array, Array, Array]:
        x_new, err, ok, K = self._stages(f, t, x, h, aux, k_first, t_end, all_stages=True)
        s = len(self.c)
        if self.dense is not None:
            return x_new, err, ok, K[s - 1], K
        # cubic Hermite: f at both ends (the end one is the last stage of first-same-as-last methods)
        f1 = K[s - 1] if self.uses_fsal() else f(t_end, x_new)
        return x_new, err, ok, f1, jnp.stack([K[0], f1])

    def interpolate(self, x: Array, x_new: Array, h: Array, data: Array, theta: Array) -> Array:
        if self.dense is not None:
            D = jnp.asarray(self.dense, x.dtype)  # (powers, stages): x + h sum_p theta^p (D @ K)[p-1]
            powers = theta ** jnp.arange(1, D.shape[0] + 1, dtype=x.dtype)
            return x + h * ((powers @ D) @ data)
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
        self, f: VectorField, t: Array, x: Array, h: Array, k_first: Array | None, t_end: Array | None
    ) -> tuple[Array, Array, Array, Array]:
        """The same step with the stages in a loop: one traced copy of ``f`` (for large diagrams,
        where compile time, not the loop overhead, dominates)."""
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
        if k_first is not None:
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
    b_err: ClassVar = tuple(a - b for a, b in zip(_DP_B, _DP_BHAT))


class SemiExplicitEulerIntegrator(IntegratorBase):
    """Symplectic (semi-explicit) Euler for second-order systems (Drake's ``SemiExplicitEulerIntegrator``).

    v₁ = v₀ + h v̇(q₀, v₀); q₁ = q₀ + h N(q₀) v₁ (via ``map_velocity_to_qdot``); z₁ = z₀ + h ż(q₀, v₀).
    First order, fixed step, one derivative evaluation a step. Needs the continuous-state layout;
    the simulator supplies it.
    """

    name: ClassVar[str] = "semi_explicit_euler"
    order: ClassVar[int] = 1
    num_stages: ClassVar[int] = 1

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        nq, nv, v_to_qdot = aux["num_q"], aux["num_v"], aux["v_to_qdot"]
        xdot = f(t, x)
        v1 = x[nq : nq + nv] + h * xdot[nq : nq + nv]
        qdot = v_to_qdot(t, x, v1)
        q1 = x[:nq] + h * qdot
        z1 = x[nq + nv :] + h * xdot[nq + nv :]
        return jnp.concatenate([q1, v1, z1]), jnp.zeros_like(x), jnp.array(True)


class _ImplicitBase(IntegratorBase):
    """Newton iteration with a Jacobian from ``jax.jacfwd``; a fixed iteration budget keeps the step
    differentiable in forward and reverse mode. Non-convergence is a sub-step failure (the step
    is shrunk, as Drake does)."""

    newton_iterations: int = eqx.field(static=True, default=10)
    newton_tolerance: float = eqx.field(static=True, default=1e-10)

    def _newton(self, residual: Callable[[Array], Array], guess: Array) -> tuple[Array, Array]:
        J = jax.jacfwd(residual)(guess)
        lu = jax.scipy.linalg.lu_factor(J)

        def body(z: Array, _: Any) -> tuple[Array, None]:
            # simplified Newton: one Jacobian a step, refreshed once halfway
            return z - jax.scipy.linalg.lu_solve(lu, residual(z)), None

        z, _ = jax.lax.scan(body, guess, None, length=self.newton_iterations)
        r = residual(z)
        scale = 1.0 + jnp.max(jnp.abs(z))
        ok = jnp.all(jnp.isfinite(z)) & (jnp.max(jnp.abs(r)) <= self.newton_tolerance * scale)
        return z, ok


class ImplicitEulerIntegrator(_ImplicitBase):
    """Backward Euler with an implicit-trapezoid error estimate (Drake's ``ImplicitEulerIntegrator``).

    First order, L-stable; error estimate of order 2.
    """

    name: ClassVar[str] = "implicit_euler"
    order: ClassVar[int] = 1
    error_estimate_order: ClassVar[int] = 2
    num_stages: ClassVar[int] = 2

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        f0 = f(t, x)
        t1 = t + h

        def residual(x1: Array) -> Array:
            return x1 - x - h * f(t1, x1)

        x1, ok = self._newton(residual, x + h * f0)

        # Drake's error estimate: the implicit trapezoid rule, solved by Newton from the implicit
        # Euler result (an explicit trapezoid through x1 would measure the stiff transient that implicit
        # Euler damps, and keep the step needlessly small on stiff problems)
        def residual_trapezoid(x2: Array) -> Array:
            return x2 - x - 0.5 * h * (f0 + f(t1, x2))

        x_trap, ok_trap = self._newton(residual_trapezoid, x1)
        return x1, x1 - x_trap, ok & ok_trap


class RadauIntegrator(_ImplicitBase):
    """Two-stage Radau IIA, third order, L-stable (Drake's ``RadauIntegrator<T, 2>``).

    c = (1/3, 1), A = ((5/12, −1/12), (3/4, 1/4)), b = (3/4, 1/4). The error estimate compares the
    end point with the implicit trapezoid rule through it (order 3).
    """

    name: ClassVar[str] = "radau3"
    order: ClassVar[int] = 3
    error_estimate_order: ClassVar[int] = 3
    num_stages: ClassVar[int] = 3

    def attempt_step(self, f: VectorField, t: Array, x: Array, h: Array, aux: Any) -> tuple[Array, Array, Array]:
        n = x.shape[0]
        f0 = f(t, x)
        A = jnp.array([[5.0 / 12.0, -1.0 / 12.0], [0.75, 0.25]], dtype=x.dtype)
        c = jnp.array([1.0 / 3.0, 1.0], dtype=x.dtype)

        def residual(Z: Array) -> Array:
            z = Z.reshape(2, n)
            F = jnp.stack([f(t + c[i] * h, x + z[i]) for i in range(2)])
            return (z - h * (A @ F)).reshape(-1)

        guess = jnp.concatenate([c[0] * h * f0, c[1] * h * f0])
        Z, ok = self._newton(residual, guess)
        x1 = x + Z.reshape(2, n)[1]  # stiffly accurate: b = last row of A
        f1 = f(t + h, x1)
        x_trap = x + 0.5 * h * (f0 + f1)
        return x1, x1 - x_trap, ok


ALL_INTEGRATORS: tuple[type[IntegratorBase], ...] = (
    ExplicitEulerIntegrator,
    SemiExplicitEulerIntegrator,
    RungeKutta2Integrator,
    RungeKutta3Integrator,
    BogackiShampine3Integrator,
    RungeKutta4Integrator,
    RungeKutta5Integrator,
    ImplicitEulerIntegrator,
    RadauIntegrator,
)

__all__ = [c.__name__ for c in ALL_INTEGRATORS] + ["IntegratorBase", "ALL_INTEGRATORS"]
