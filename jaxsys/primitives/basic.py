"""Stateless blocks and simple sources from Drake's systems/primitives.

Port names follow Drake: vector blocks use ``u0``/``y0`` (Adder's output is ``sum``, PassThrough's
ports are ``u``/``y``). Numeric values (gains, limits, constants) are numeric parameters, so they
live in the context and can be differentiated or batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..framework.context import Context
from ..framework.errors import DeclarationError, JaxsysError
from ..framework.leaf_system import LeafSystem


class Adder(LeafSystem):
    """y = u0 + u1 + ... (Drake's ``Adder(num_inputs, size)``). Ports ``u0``, ``u1``, ... and ``sum``."""

    def __init__(self, num_inputs: int, size: int, name: str = "") -> None:
        super().__init__(name)
        for i in range(num_inputs):
            self.declare_vector_input_port(f"u{i}", size)
        self.declare_vector_output_port("sum", size, self.calc_sum)

    def calc_sum(self, context: Context) -> Any:
        """Sum of all inputs."""
        total = self.get_input_port(0).eval(context)
        for i in range(1, self.num_input_ports()):
            total = total + self.get_input_port(i).eval(context)
        return total


def _per_element(value: Any, size: int, owner: str, what: str, positive: bool = False) -> np.ndarray:
    """``value`` (a scalar, or one per element) as a float vector of ``size``: a named error for another
    length, a non-numeric or non-finite value, or (``positive``) a value <= 0."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as e:
        raise JaxsysError(f"{owner}: {what} must be a number or {size} numbers; got {value!r:.60}.") from e
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] not in (1, size)):
        raise JaxsysError(
            f"{owner}: {what} must be a scalar or have one value per element (size {size}); got shape {arr.shape}."
        )
    if not np.all(np.isfinite(arr)):
        raise JaxsysError(f"{owner}: {what} must be finite; got {arr.tolist()}.")
    if positive and not np.all(arr > 0):
        raise JaxsysError(f"{owner}: {what} must be > 0; got {arr.tolist()}.")
    return np.broadcast_to(arr, (size,))


def _check_size(size: Any, owner: str) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise JaxsysError(f"{owner}: size must be a positive integer; got {size!r}.")
    return int(size)


class Gain(LeafSystem):
    """y = k ⊙ u (Drake's ``Gain(k, size)``); numeric parameter 0 holds k (size ``size``). Ports ``u0``, ``y0``."""

    def __init__(self, k: float | Any, size: int, name: str = "") -> None:
        super().__init__(name)
        size = _check_size(size, "Gain")
        self.declare_numeric_parameter(_per_element(k, size, "Gain", "the gain k"))
        self.declare_vector_input_port("u0", size)
        self.declare_vector_output_port("y0", size, self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """k ⊙ u."""
        return context.get_numeric_parameter(0) * self.get_input_port(0).eval(context)


class MatrixGain(LeafSystem):
    """y = D u (Drake's ``MatrixGain(D)``); D (shape (m, n)) is abstract parameter 0. Ports ``u0``, ``y0``."""

    def __init__(self, D: Any, name: str = "") -> None:
        super().__init__(name)
        D = np.atleast_2d(np.asarray(D, dtype=float))
        self.declare_abstract_parameter(jnp.asarray(D))
        self.declare_vector_input_port("u0", D.shape[1])
        self.declare_vector_output_port("y0", D.shape[0], self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """D u."""
        return context.get_abstract_parameter(0) @ self.get_input_port(0).eval(context)


class ConstantVectorSource(LeafSystem):
    """y = value (Drake's ``ConstantVectorSource``); the value is numeric parameter 0. Port ``y0``."""

    def __init__(self, value: Any, name: str = "") -> None:
        super().__init__(name)
        value = np.atleast_1d(np.asarray(value, dtype=float))
        self.declare_numeric_parameter(value)
        self.declare_vector_output_port("y0", value.shape[0], self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """The source value."""
        return context.get_numeric_parameter(0)


class PassThrough(LeafSystem):
    """y = u (Drake's ``PassThrough(size)``). Ports ``u`` and ``y``."""

    def __init__(self, size: int, name: str = "") -> None:
        super().__init__(name)
        self.declare_vector_input_port("u", size)
        self.declare_vector_output_port("y", size, self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """The input."""
        return self.get_input_port(0).eval(context)


class Saturation(LeafSystem):
    """y = clip(u, min, max) elementwise (Drake's ``Saturation``), in Drake's two forms:

    - ``Saturation(lower, upper)``: fixed limits, numeric parameters 0 and 1 (in the context, so they
      can be differentiated or batched). Ports ``u0``, ``y0``.
    - ``Saturation(input_size)``: limits from input ports, as Drake's: ``u0`` (the signal), ``u1``
      (the upper limit) and ``u2`` (the lower limit); either limit port may be left unconnected
      (unbounded on that side), not both. A lower limit above the upper one at run time gives NaN
      output rather than a silent clip (use ``jax_debug_nans`` or check the output).
    """

    ports_enabled: bool = eqx.field(static=True)

    def __init__(self, lower: Any, upper: Any = None, name: str = "") -> None:
        super().__init__(name)
        if upper is None and isinstance(lower, (int, np.integer)) and not isinstance(lower, bool):
            size = _check_size(lower, "Saturation")
            self.ports_enabled = True
            self.declare_vector_input_port("u0", size)
            self.declare_vector_input_port("u1", size)  # max (Drake's order)
            self.declare_vector_input_port("u2", size)  # min
            self.declare_vector_output_port("y0", size, self.calc_y)
            return
        if upper is None:
            raise DeclarationError(
                f"Saturation {name!r}: give both limits, Saturation(lower, upper), or an input size for limits "
                f"from input ports, Saturation(input_size); got Saturation({lower!r})."
            )
        self.ports_enabled = False
        lo = np.atleast_1d(np.asarray(lower, dtype=float))
        hi = np.atleast_1d(np.asarray(upper, dtype=float))
        lo, hi = np.broadcast_arrays(lo, hi)
        if np.any(lo > hi):
            raise DeclarationError(f"Saturation {name!r}: lower limit above upper limit ({lo} > {hi}).")
        self.declare_numeric_parameter(lo)
        self.declare_numeric_parameter(hi)
        self.declare_vector_input_port("u0", lo.shape[0])
        self.declare_vector_output_port("y0", lo.shape[0], self.calc_y)

    def get_max_value_port(self) -> Any:
        """The upper-limit input port ``u1`` (Drake's ``get_max_value_port``)."""
        return self.get_input_port(1)

    def get_min_value_port(self) -> Any:
        """The lower-limit input port ``u2`` (Drake's ``get_min_value_port``)."""
        return self.get_input_port(2)

    def calc_y(self, context: Context) -> Any:
        """The clipped input."""
        u = self.get_input_port(0).eval(context)
        if not self.ports_enabled:
            return jnp.clip(u, context.get_numeric_parameter(0), context.get_numeric_parameter(1))
        has_max, has_min = self.get_input_port(1).has_value(context), self.get_input_port(2).has_value(context)
        if not (has_max or has_min):
            raise JaxsysError(
                f"Saturation {self.get_system_id_string()}: neither limit port (u1 = max, u2 = min) has a value; "
                f"connect at least one (Drake: 'has_min || has_max')."
            )
        hi = self.get_input_port(1).eval(context) if has_max else jnp.full_like(u, jnp.inf)
        lo = self.get_input_port(2).eval(context) if has_min else jnp.full_like(u, -jnp.inf)
        return jnp.where(lo <= hi, jnp.clip(u, lo, hi), jnp.nan)


class ConstantValueSource(LeafSystem):
    """Outputs a constant value of any pytree type (Drake's ``ConstantValueSource``) on the abstract
    port ``y0``. The value is abstract parameter 0 (in the context: it can be changed per context,
    batched, or differentiated)."""

    def __init__(self, value: Any, name: str = "") -> None:
        super().__init__(name)
        self.declare_abstract_parameter(value)
        self.declare_abstract_output_port("y0", value, lambda c: c.get_abstract_parameter(0), direct_feedthrough=False)


class PortSwitch(LeafSystem):
    """Passes through the input chosen by the ``port_selector`` input (Drake's ``PortSwitch``).

    ``PortSwitch(vector_size, input_names)`` switches vector signals of ``vector_size``;
    ``PortSwitch(model_value, input_names)`` switches pytree (abstract) signals shaped like the model.
    Drake declares the inputs one by one (``DeclareInputPort(name)``); systems here are immutable, so
    they are named at construction. Input ports: ``port_selector`` (an integer scalar, the index into
    ``input_names``, an abstract port), then one per name; output ``value``. The selection is traced
    (``jnp`` indexing), so it may change during a simulation; an index out of range is clamped (as JAX
    indexing does).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    is_vector: bool = eqx.field(static=True)

    def __init__(self, vector_size_or_model: Any, input_names: Sequence[str] = ("u0", "u1"), name: str = "") -> None:
        super().__init__(name)
        self.names = tuple(input_names)
        if not self.names:
            raise DeclarationError(f"PortSwitch {name!r}: give at least one input name.")
        self.is_vector = isinstance(vector_size_or_model, (int, np.integer)) and not isinstance(
            vector_size_or_model, bool
        )
        self.declare_abstract_input_port("port_selector", jnp.zeros((), jnp.int32))
        for n in self.names:
            if self.is_vector:
                self.declare_vector_input_port(n, int(vector_size_or_model))
            else:
                self.declare_abstract_input_port(n, vector_size_or_model)
        if self.is_vector:
            self.declare_vector_output_port("value", int(vector_size_or_model), self.calc_value)
        else:
            self.declare_abstract_output_port("value", vector_size_or_model, self.calc_value)

    def get_port_selector_input_port(self) -> Any:
        """The ``port_selector`` input port (Drake's ``get_port_selector_input_port``)."""
        return self.get_input_port(0)

    def calc_value(self, context: Context) -> Any:
        """The selected input's value."""
        import jax

        k = jnp.asarray(self.get_input_port(0).eval(context), jnp.int32)
        values = [self.get_input_port(i + 1).eval(context) for i in range(len(self.names))]
        return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves)[k], *values)


class WrapToSystem(LeafSystem):
    """Wraps chosen elements of the input into intervals: y_i = low + (u_i − low) mod (high − low) for each
    ``index: (low, high)`` in ``intervals``, y_i = u_i for the others (Drake's ``WrapToSystem``, whose
    ``set_interval`` calls become the ``intervals`` argument). Ports ``u0``, ``y0``."""

    lows: tuple[float, ...] = eqx.field(static=True)
    highs: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, size: int, intervals: dict[int, tuple[float, float]], name: str = "") -> None:
        super().__init__(name)
        size = _check_size(size, "WrapToSystem")
        lows, highs = [-np.inf] * size, [np.inf] * size
        for i, (lo, hi) in intervals.items():
            if not 0 <= int(i) < size:
                raise DeclarationError(f"WrapToSystem {name!r}: index {i} is outside the input (size {size}).")
            if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
                raise DeclarationError(
                    f"WrapToSystem {name!r}: interval {i} must have finite low < high; got ({lo}, {hi})."
                )
            lows[int(i)], highs[int(i)] = float(lo), float(hi)
        self.lows, self.highs = tuple(lows), tuple(highs)
        self.declare_vector_input_port("u0", size)
        self.declare_vector_output_port("y0", size, self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """The wrapped input."""
        u = self.get_input_port(0).eval(context)
        lo, hi = jnp.asarray(self.lows, u.dtype), jnp.asarray(self.highs, u.dtype)
        wrap = jnp.isfinite(lo)
        width = jnp.where(wrap, hi - lo, 1.0)
        base = jnp.where(wrap, lo, 0.0)
        return jnp.where(wrap, base + jnp.mod(u - base, width), u)


class Multiplexer(LeafSystem):
    """Concatenates inputs of the given sizes into one vector (Drake's ``Multiplexer``).

    ``Multiplexer(3)`` has three scalar inputs; ``Multiplexer([2, 1])`` inputs of sizes 2 and 1.
    Ports ``u0``, ``u1``, ... and ``y0``.
    """

    def __init__(self, input_sizes: int | Sequence[int], name: str = "") -> None:
        super().__init__(name)
        sizes = [1] * input_sizes if isinstance(input_sizes, int) else list(input_sizes)
        for i, n in enumerate(sizes):
            self.declare_vector_input_port(f"u{i}", n)
        self.declare_vector_output_port("y0", sum(sizes), self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """The concatenated inputs."""
        return jnp.concatenate([self.get_input_port(i).eval(context) for i in range(self.num_input_ports())])


class Demultiplexer(LeafSystem):
    """Splits a vector into outputs of the given sizes (Drake's ``Demultiplexer``).

    ``Demultiplexer(4)`` gives four scalar outputs; ``Demultiplexer([2, 2])`` two of size 2.
    Ports ``u0`` and ``y0``, ``y1``, ...
    """

    sizes: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, output_sizes: int | Sequence[int], name: str = "") -> None:
        super().__init__(name)
        self.sizes = tuple([1] * output_sizes if isinstance(output_sizes, int) else output_sizes)
        self.declare_vector_input_port("u0", sum(self.sizes))
        start = 0
        for i, n in enumerate(self.sizes):

            def piece(c: Context, a: int = start, b: int = start + n) -> Any:
                return self.get_input_port(0).eval(c)[a:b]

            self.declare_vector_output_port(f"y{i}", n, piece)
            start += n


class Sine(LeafSystem):
    """y0 = a sin(ω t + φ), y1 = its derivative, y2 = its second derivative (Drake's ``Sine``).

    Numeric parameters: 0 amplitude a, 1 frequency ω (rad/s), 2 phase φ (rad), each of size ``size``.
    """

    def __init__(self, amplitude: Any, frequency: Any, phase: Any, size: int = 1, name: str = "") -> None:
        super().__init__(name)
        size = _check_size(size, "Sine")
        for what, v in (("amplitude", amplitude), ("frequency", frequency), ("phase", phase)):
            self.declare_numeric_parameter(_per_element(v, size, "Sine", what))
        self.declare_vector_output_port("y0", size, lambda c: self._value(c, 0))
        self.declare_vector_output_port("y1", size, lambda c: self._value(c, 1))
        self.declare_vector_output_port("y2", size, lambda c: self._value(c, 2))

    def _value(self, context: Context, derivative: int) -> Any:
        a, w, p = (context.get_numeric_parameter(i) for i in range(3))
        arg = w * context.get_time() + p
        return [a * jnp.sin(arg), a * w * jnp.cos(arg), -a * w * w * jnp.sin(arg)][derivative]


class FirstOrderLowPassFilter(LeafSystem):
    """ẋ = (u − x)/τ, y = x (Drake's ``FirstOrderLowPassFilter(time_constant, size)``).

    Numeric parameter 0 holds τ (s, one per element). Ports ``u0`` and ``y0``; no direct feedthrough.
    """

    def __init__(self, time_constant: float | Any = 1.0, size: int = 1, name: str = "") -> None:
        super().__init__(name)
        size = _check_size(size, "FirstOrderLowPassFilter")
        self.declare_continuous_state(size)
        tau = _per_element(time_constant, size, "FirstOrderLowPassFilter", "time_constant", positive=True)
        self.declare_numeric_parameter(tau)
        self.declare_vector_input_port("u0", size)
        self.declare_vector_output_port("y0", size, self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """The filter state."""
        return context.get_continuous_state_vector()

    def do_calc_time_derivatives(self, context: Context) -> Any:
        x = context.get_continuous_state_vector()
        u = self.get_input_port(0).eval(context)
        return (u - x) / context.get_numeric_parameter(0)
