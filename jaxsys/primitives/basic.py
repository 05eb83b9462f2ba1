"""Basic blocks from Drake's systems/primitives: Adder, Gain, ConstantVectorSource, PassThrough,
FirstOrderLowPassFilter."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..framework.context import Context
from ..framework.leaf_system import LeafSystem


class Adder(LeafSystem):
    """y = u0 + u1 + ... (Drake's ``Adder(num_inputs, size)``). Ports ``u0``.. and ``sum``."""

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


class Gain(LeafSystem):
    """y = k u, elementwise (Drake's ``Gain(k, size)``). Numeric parameter 0 holds k (size ``size``).

    Ports ``u`` and ``y``.
    """

    def __init__(self, k: float | Any, size: int, name: str = "") -> None:
        super().__init__(name)
        self.declare_numeric_parameter(np.broadcast_to(np.asarray(k, dtype=float), (size,)))
        self.declare_vector_input_port("u", size)
        self.declare_vector_output_port("y", size, self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """k ⊙ u."""
        return context.get_numeric_parameter(0) * self.get_input_port(0).eval(context)


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


class FirstOrderLowPassFilter(LeafSystem):
    """ẋ = (u − x)/τ, y = x (Drake's ``FirstOrderLowPassFilter(time_constant, size)``).

    Numeric parameter 0 holds τ (s, one per element). Ports ``u`` and ``y``; no direct feedthrough.
    """

    def __init__(self, time_constant: float = 1.0, size: int = 1, name: str = "") -> None:
        super().__init__(name)
        self.declare_continuous_state(size)
        self.declare_numeric_parameter(np.full((size,), float(time_constant)))
        self.declare_vector_input_port("u", size)
        self.declare_vector_output_port("y", size, self.calc_y)

    def calc_y(self, context: Context) -> Any:
        """The filter state."""
        return context.get_continuous_state_vector()

    def do_calc_time_derivatives(self, context: Context) -> Any:
        x = context.get_continuous_state_vector()
        u = self.get_input_port(0).eval(context)
        return (u - x) / context.get_numeric_parameter(0)


__all__ = ["Adder", "Gain", "ConstantVectorSource", "PassThrough", "FirstOrderLowPassFilter"]
