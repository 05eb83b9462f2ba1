"""Input and output ports (Drake's ``InputPort`` / ``OutputPort``).

Ports are static structure: plain, immutable Python objects made by ``declare_*_port`` (or by a
DiagramBuilder for exported ports). Their values live in a Context: `InputPort.eval` reads the
value fixed on the port or supplied by the enclosing Diagram, `InputPort.fix_value` returns a
new context with a fixed value (Drake's ``FixValue``), `OutputPort.eval` computes the output.

Imports (within jaxsys): ``context``, ``errors``, ``system``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from .context import default_float_dtype
from .drake_names import drake_name_error
from .errors import PortError


if TYPE_CHECKING:
    from .context import Context
    from .system import System

VECTOR = "vector"
ABSTRACT = "abstract"


def abstract_signature(model: Any) -> tuple[Any, tuple[tuple[int, ...], ...]]:
    """The static description of an abstract value: its pytree structure and leaf shapes."""
    leaves, treedef = jax.tree_util.tree_flatten(model)
    return treedef, tuple(tuple(np.shape(x)) for x in leaves)


class _Port:
    __slots__ = ("_system", "_index", "_name", "_kind", "_size", "_model")

    def __init__(self, system: System, index: int, name: str, kind: str, size: int, model: Any) -> None:
        self._system = system
        self._index = index
        self._name = name
        self._kind = kind
        self._size = size
        self._model = model

    _direction = "Port"

    def get_system(self) -> System:
        """The System that owns this port (Drake: ``get_system``)."""
        return self._system

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: Drake's CamelCase names get an error naming ours
        if name in _Port.__slots__:  # an unset slot (during construction or unpickling)
            raise AttributeError(name)
        raise drake_name_error(self, name)

    def get_index(self) -> int:
        """The port's index among its system's ports of this direction (Drake: ``get_index``)."""
        return self._index

    def get_name(self) -> str:
        """The port's name (Drake: ``get_name``)."""
        return self._name

    def size(self) -> int:
        """Vector size; 0 for an abstract port (Drake: ``size``)."""
        return self._size

    def get_data_type(self) -> str:
        """``"vector"`` or ``"abstract"`` (Drake: ``get_data_type``: kVectorValued / kAbstractValued)."""
        return self._kind

    def is_abstract(self) -> bool:
        """True for an abstract-valued port."""
        return self._kind == ABSTRACT

    def get_model(self) -> Any:
        """The model value of an abstract port (None for vector ports)."""
        return self._model

    def get_full_description(self) -> str:
        """E.g. ``InputPort[0] (tau) of System ::diagram::pendulum (Pendulum)`` (Drake: same name)."""
        s = self._system
        return f"{self._direction}[{self._index}] ({self._name}) of System {s.get_path()} ({type(s).__name__})"

    def describe_type(self) -> str:
        """A short description of the value type, for error messages."""
        if self._kind == VECTOR:
            return f"a vector of size {self._size}"
        return f"an abstract value like {_brief(self._model)}"

    def allocate(self) -> Any:
        """A zero value of the port's type (Drake: ``Allocate``)."""
        if self._kind == VECTOR:
            return jnp.zeros((self._size,), default_float_dtype())
        return jax.tree_util.tree_map(jnp.asarray, self._model)

    def __repr__(self) -> str:
        return f"<{self.get_full_description()}>"

    def check_value(self, value: Any, where: str) -> Any:
        """Check a value against the port's type; return it as a JAX value. Raises PortError."""
        if self._kind == VECTOR:
            if isinstance(value, (str, bytes)) or (
                not isinstance(value, jax.core.Tracer) and np.asarray(value).dtype.kind not in "biufc"
            ):
                raise PortError(
                    f"{where}: expected a numeric vector of size {self._size} for {self.get_full_description()}, "
                    f"but the value given is {type(value).__name__} {value!r:.60}."
                )
            if jnp.iscomplexobj(value):
                raise PortError(
                    f"{where}: expected a real vector of size {self._size} for {self.get_full_description()}, "
                    f"but the value given is complex."
                )
            shape = tuple(np.shape(value))
            if shape != (self._size,):
                if shape == () and self._size == 1:
                    return jnp.reshape(jnp.asarray(value), (1,))
                raise PortError(
                    f"{where}: expected a vector of size {self._size} for "
                    f"{self.get_full_description()}, but the value given has shape {shape}."
                )
            arr = jnp.asarray(value)
            if not jnp.issubdtype(arr.dtype, jnp.inexact):
                arr = arr.astype(default_float_dtype())
            return arr
        sig = abstract_signature(self._model)
        got = abstract_signature(value)
        if sig != got:
            raise PortError(
                f"{where}: expected {self.describe_type()} for {self.get_full_description()}, "
                f"but the value given is {_brief(value)}."
            )
        return value


_KINDS = {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "complex"}


def abstract_value_kinds(model: Any) -> tuple[str, ...]:
    """The value type of each leaf of an abstract value: bool, int, float, complex, or the Python type
    name of a non-numeric leaf. Float widths are not compared (a model declared in float32 carries
    float64 values in an x64 context)."""
    out = []
    for x in jax.tree_util.tree_leaves(model):
        try:
            dt = x.dtype if hasattr(x, "dtype") else np.result_type(x)
            out.append(_KINDS.get(np.dtype(dt).kind, str(dt)))
        except TypeError:
            out.append(type(x).__name__)
    return tuple(out)


def _brief(value: Any) -> str:
    leaves, treedef = jax.tree_util.tree_flatten(value)
    shapes = [tuple(np.shape(x)) for x in leaves]
    return f"{type(value).__name__} (structure {treedef}, leaf shapes {shapes})"


class InputPort(_Port):
    """An input port of a System (Drake's ``InputPort``)."""

    __slots__ = ()
    _direction = "InputPort"

    def eval(self, context: Context) -> Any:
        """The port's value in ``context`` (Drake: ``InputPort::Eval``).

        The value is the one fixed on the port (`fix_value`) or, inside a Diagram, the value of
        the output port it is connected to. Raises [`InputPortNotConnectedError`][jaxsys.InputPortNotConnectedError]
        if neither.
        """
        self._system.validate_context(context)
        return self._system._eval_input_raw(context, self._index)

    def fix_value(self, context: Context, value: Any) -> Context:
        """A copy of ``context`` with ``value`` fixed on this port (Drake: ``FixValue``).

        A vector port takes an array of shape ``(size,)`` (a scalar is accepted for size 1); an
        abstract port a pytree with the model's structure and leaf shapes.
        """
        self._system.validate_context(context)
        value = self.check_value(value, "InputPort.fix_value")
        inputs = list(context.inputs)
        inputs[self._index] = value
        return dataclasses.replace(cast(Any, context), inputs=tuple(inputs))

    def has_value(self, context: Context) -> bool:
        """True if the port has a value in ``context`` (Drake: ``HasValue``)."""
        try:
            self.eval(context)
        except PortError:
            return False
        return True


class OutputPort(_Port):
    """An output port of a System (Drake's ``OutputPort``)."""

    __slots__ = ()
    _direction = "OutputPort"

    def eval(self, context: Context) -> Any:
        """Compute the port's value from ``context`` (Drake: ``OutputPort::Eval``)."""
        self._system.validate_context(context)
        return self._system._calc_output_raw(context, self._index)

    def calc(self, context: Context) -> Any:
        """Same as `eval` (Drake: ``OutputPort::Calc``; there is no cache to bypass)."""
        return self.eval(context)


def vector_input_ports(system: System) -> list[InputPort]:
    """The vector-valued input ports of ``system``, in index order (abstract ones left out): what
    linearization, LQR, estimators and trajectory optimization treat as the input u."""
    ports = (system.get_input_port(i) for i in range(system.num_input_ports()))
    return [p for p in ports if not p.is_abstract()]


def vector_output_ports(system: System) -> list[OutputPort]:
    """The vector-valued output ports of ``system``, in index order (abstract ones left out)."""
    ports = (system.get_output_port(i) for i in range(system.num_output_ports()))
    return [p for p in ports if not p.is_abstract()]
