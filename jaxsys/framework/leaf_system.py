"""``LeafSystem``: a system authored by declaring state, parameters and ports (Drake's ``LeafSystem<T>``).

A subclass declares its structure in ``__init__`` with the ``declare_*`` methods (Drake's
``Declare*``), and overrides the calculations it needs as methods that *return* values::

    class Pendulum(jaxsys.LeafSystem):
        def __init__(self):
            super().__init__(name="pendulum")
            self.declare_continuous_state(num_q=1, num_v=1, num_z=0)
            self.declare_numeric_parameter([1.0, 1.0, 9.81, 0.1])       # m, l, g, b
            self.declare_vector_input_port("tau", 1)
            self.declare_state_output_port("state", ContinuousStateIndex(0))

        def do_calc_time_derivatives(self, context):
            theta, omega = context.get_continuous_state_vector()
            m, l, g, b = context.get_numeric_parameter(0)
            tau = self.get_input_port(0).eval(context)[0]
            return jnp.array([omega, (tau - b * omega) / (m * l**2) - g / l * jnp.sin(theta)])

Like every ``equinox.Module``, a subclass must annotate any extra attribute it sets in ``__init__``
(``gain: float = eqx.field(static=True)``).

Imports (within jaxsys): ``context``, ``errors``, ``feedthrough``, ``leaf_events``, ``ports``,
``vectorize``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .context import (
    AbstractValues,
    Context,
    ContinuousState,
    DiscreteValues,
    LeafContext,
    Parameters,
    State,
    as_float_array,
)
from .errors import (
    DeclarationError,
    InputPortNotConnectedError,
    MissingOverrideError,
    PortError,
    StateError,
    _Raise,
)
from .events import _call
from .feedthrough import jaxpr_dependencies
from .leaf_events import LeafEvents
from .ports import ABSTRACT, VECTOR, InputPort, OutputPort, abstract_signature
from .vectorize import leaf_signature


class ContinuousStateIndex(int):
    """Index of the continuous state (always 0) (Drake: ``ContinuousStateIndex``)."""


class DiscreteStateIndex(int):
    """Index of a discrete state group (Drake: ``DiscreteStateIndex``)."""


class AbstractStateIndex(int):
    """Index of an abstract state (Drake: ``AbstractStateIndex``)."""


class NumericParameterIndex(int):
    """Index of a numeric parameter group (Drake: ``NumericParameterIndex``)."""


class AbstractParameterIndex(int):
    """Index of an abstract parameter (Drake: ``AbstractParameterIndex``)."""


class _Unfed:
    """Placeholder for an input that an output was declared (or found) not to depend on."""

    def __init__(self, input_port: InputPort, output_port: OutputPort) -> None:
        self.input_port = input_port
        self.output_port = output_port


class _Lazy:
    """An input value a Diagram computes only if the leaf reads it."""

    def __init__(self, thunk: Callable[[], Any]) -> None:
        self.thunk = thunk
        self.done = False
        self.value: Any = None

    def get(self) -> Any:
        if not self.done:
            self.value = self.thunk()
            self.done = True
        return self.value


for _cls in (_Unfed, _Lazy):
    jax.tree_util.register_pytree_node(_cls, lambda x: ((), x), lambda aux, _: aux)


_FEEDTHROUGH_CACHE: dict[Any, frozenset[tuple[int, int]]] = {}


class LeafSystem(LeafEvents):
    """Base class of systems written by users (Drake's ``LeafSystem<T>``). See the module docstring.

    **Arguments:**
    - `name`: the system's name (its path in a diagram is ``::diagram::name``).
    """

    def __init__(self, name: str = "") -> None:
        super().__init__(name)  # type: ignore[arg-type]  # (System.__init__(name): mypy reads equinox's field init)
        spec = self._spec
        spec.num_q = spec.num_v = spec.num_z = 0
        spec.x0 = None
        spec.continuous_declared = False
        spec.discrete_defaults = []
        spec.abstract_defaults = []
        spec.numeric_param_defaults = []
        spec.abstract_param_defaults = []
        spec.output_calcs = []
        spec.output_feedthrough = []
        spec.events = []
        spec.witnesses = []

    # ===== declarations: state =================================================================
    def declare_continuous_state(
        self,
        num_q_or_size: int | None = None,
        num_v: int | None = None,
        num_z: int | None = None,
        *,
        default: Any = None,
        num_q: int | None = None,
    ) -> ContinuousStateIndex:
        """Declare the continuous state x = [q, v, z] (Drake: ``DeclareContinuousState``).

        Forms: ``declare_continuous_state(size)`` (all misc states z, as Drake's single-size form),
        ``declare_continuous_state(num_q, num_v, num_z)`` (second-order structure), or either with
        ``default=`` an initial vector (Drake's model-vector form; else zeros).
        """
        spec = self._spec
        if spec.continuous_declared:
            raise DeclarationError(
                f"System {self.get_system_id_string()} already declared its continuous state; "
                f"a system has one continuous state (declare it once, with all its variables)."
            )
        if num_q is not None:
            if num_q_or_size is not None:
                raise DeclarationError("declare_continuous_state: give num_q once.")
            num_q_or_size = num_q
            num_v = num_v or 0
            num_z = num_z or 0
        if num_v is None and num_z is None:
            if num_q_or_size is None:
                if default is None:
                    raise DeclarationError(
                        f"declare_continuous_state on System {self.get_system_id_string()}: give a "
                        f"size, (num_q, num_v, num_z) or default=."
                    )
                num_q_or_size = int(np.size(default))
            q, v, z = 0, 0, int(num_q_or_size)
        else:
            q, v, z = int(num_q_or_size or 0), int(num_v or 0), int(num_z or 0)
        if min(q, v, z) < 0:
            raise DeclarationError(
                f"declare_continuous_state on System {self.get_system_id_string()}: sizes must be "
                f">= 0; got num_q={q}, num_v={v}, num_z={z}."
            )
        if v > q:
            raise DeclarationError(
                f"declare_continuous_state on System {self.get_system_id_string()}: num_v={v} > "
                f"num_q={q}; Drake requires num_q >= num_v."
            )
        n = q + v + z
        x0 = np.zeros(n) if default is None else np.asarray(default, dtype=float).reshape(-1)
        if x0.shape != (n,):
            raise DeclarationError(
                f"declare_continuous_state on System {self.get_system_id_string()}: default has "
                f"{x0.size} element(s) but num_q + num_v + num_z = {n}."
            )
        spec.num_q, spec.num_v, spec.num_z, spec.x0 = q, v, z, x0
        spec.continuous_declared = True
        return ContinuousStateIndex(0)

    def declare_discrete_state(self, size_or_default: Any) -> DiscreteStateIndex:
        """Declare a group of discrete state variables (Drake: ``DeclareDiscreteState``).

        Give a size (zeros) or a default vector. May be called several times; returns the group index.
        """
        if (
            np.ndim(size_or_default) == 0
            and float(size_or_default).is_integer()
            and isinstance(size_or_default, (int, np.integer))
        ):
            n = int(size_or_default)
            if n < 0:
                raise DeclarationError(f"declare_discrete_state on System {self.get_system_id_string()}: size {n} < 0.")
            default = np.zeros(n)
        else:
            default = np.asarray(size_or_default, dtype=float).reshape(-1)
        self._spec.discrete_defaults.append(default)
        return DiscreteStateIndex(len(self._spec.discrete_defaults) - 1)

    def declare_abstract_state(self, value: Any) -> AbstractStateIndex:
        """Declare an abstract state holding any pytree; ``value`` is its default (Drake: ``DeclareAbstractState``)."""
        self._spec.abstract_defaults.append(value)
        return AbstractStateIndex(len(self._spec.abstract_defaults) - 1)

    # ===== declarations: parameters =============================================================
    def declare_numeric_parameter(self, default: Any) -> NumericParameterIndex:
        """Declare a numeric parameter vector with a default (Drake: ``DeclareNumericParameter``).

        A scalar default makes a vector of size 1. Values live in the Context
        (``context.get_numeric_parameter(index)``), so ``jax.grad`` and ``jax.vmap`` act on them.
        """
        default = np.atleast_1d(np.asarray(default, dtype=float))
        if default.ndim != 1:
            raise DeclarationError(
                f"declare_numeric_parameter on System {self.get_system_id_string()}: a numeric "
                f"parameter is a vector; got shape {default.shape}. Use declare_abstract_parameter "
                f"for other pytrees."
            )
        self._spec.numeric_param_defaults.append(default)
        return NumericParameterIndex(len(self._spec.numeric_param_defaults) - 1)

    def declare_abstract_parameter(self, model: Any) -> AbstractParameterIndex:
        """Declare a parameter holding any pytree (Drake: ``DeclareAbstractParameter``)."""
        self._spec.abstract_param_defaults.append(model)
        return AbstractParameterIndex(len(self._spec.abstract_param_defaults) - 1)

    # ===== declarations: ports ==================================================================
    def _new_port_name(self, name: str | None, ports: list[Any], prefix: str, kind: str) -> str:
        if name is None:
            name = f"{prefix}{len(ports)}"
        if not isinstance(name, str) or not name:
            raise DeclarationError(
                f"System {self.get_system_id_string()}: a port name must be a non-empty string; got {name!r}."
            )
        if any(p.get_name() == name for p in ports):
            raise DeclarationError(f"System {self.get_system_id_string()} already has an {kind} port named {name!r}.")
        return name

    def _vector_size(self, size_or_model: Any, what: str) -> int:
        if isinstance(size_or_model, (int, np.integer)):
            size = int(size_or_model)
        else:
            size = int(np.size(size_or_model))
        if size < 0:
            raise DeclarationError(f"{what} on System {self.get_system_id_string()}: size {size} < 0.")
        return size

    def declare_vector_input_port(self, name: str | None, size: int | Any) -> InputPort:
        """Declare a vector-valued input port (Drake: ``DeclareVectorInputPort``).

        **Arguments:**
        - `name`: the port's name (None: ``u<index>``, as Drake's default names).
        - `size`: its size (or a model vector, whose size is used).
        """
        ports = self._spec.input_ports
        name = self._new_port_name(name, ports, "u", "input")
        size = self._vector_size(size, "declare_vector_input_port")
        port = InputPort(self, len(ports), name, VECTOR, size, None)
        ports.append(port)
        self._spec.feedthrough_cache = None
        return port

    def declare_abstract_input_port(self, name: str | None, model: Any) -> InputPort:
        """Declare an input port holding any pytree shaped like ``model`` (Drake: ``DeclareAbstractInputPort``)."""
        ports = self._spec.input_ports
        name = self._new_port_name(name, ports, "u", "input")
        port = InputPort(self, len(ports), name, ABSTRACT, 0, model)
        ports.append(port)
        self._spec.feedthrough_cache = None
        return port

    def _feedthrough_decl(self, direct_feedthrough: Any) -> frozenset[int] | None:
        if direct_feedthrough is None:
            return None
        if direct_feedthrough is True:
            return frozenset(range(self.num_input_ports()))
        if direct_feedthrough is False:
            return frozenset()
        out = set()
        for p in direct_feedthrough:
            out.add(self.get_input_port(p).get_index() if not isinstance(p, InputPort) else p.get_index())
        return frozenset(out)

    def _declare_output(
        self, name: str | None, kind: str, size: int, model: Any, calc: Any, direct_feedthrough: Any
    ) -> OutputPort:
        if not callable(calc):
            raise DeclarationError(
                f"Output port {name!r} of System {self.get_system_id_string()}: calc must be a "
                f"function of the context returning the value; got {type(calc).__name__}."
            )
        ports = self._spec.output_ports
        name = self._new_port_name(name, ports, "y", "output")
        port = OutputPort(self, len(ports), name, kind, size, model)
        ports.append(port)
        self._spec.output_calcs.append(calc)
        self._spec.output_feedthrough.append(direct_feedthrough)
        self._spec.feedthrough_cache = None
        return port

    def declare_vector_output_port(
        self,
        name: str | None,
        size: int | Any,
        calc: Callable[[Context], Any],
        *,
        direct_feedthrough: bool | Iterable[int | str] | None = None,
    ) -> OutputPort:
        """Declare a vector output port computed by ``calc(context) -> array (size,)``.

        Drake: ``DeclareVectorOutputPort``. ``direct_feedthrough``: True/False, or the input ports
        (indices or names) the value depends on (Drake's ``prerequisites_of_calc``); None (default)
        finds it by tracing ``calc``.
        """
        size = self._vector_size(size, "declare_vector_output_port")
        return self._declare_output(name, VECTOR, size, None, calc, direct_feedthrough)

    def declare_abstract_output_port(
        self,
        name: str | None,
        model: Any,
        calc: Callable[[Context], Any],
        *,
        direct_feedthrough: bool | Iterable[int | str] | None = None,
    ) -> OutputPort:
        """Declare an output port computed by ``calc(context)``, a pytree shaped like ``model``.

        Drake: ``DeclareAbstractOutputPort``.
        """
        return self._declare_output(name, ABSTRACT, 0, model, calc, direct_feedthrough)

    def declare_state_output_port(self, name: str | None, state_index: Any) -> OutputPort:
        """Declare an output port that copies a state (Drake: ``DeclareStateOutputPort``).

        ``state_index`` is a [`ContinuousStateIndex`][jaxsys.ContinuousStateIndex] (the whole continuous state), a
        [`DiscreteStateIndex`][jaxsys.DiscreteStateIndex] (one group) or an
        [`AbstractStateIndex`][jaxsys.AbstractStateIndex].
        """
        spec = self._spec
        if isinstance(state_index, DiscreteStateIndex):
            k = int(state_index)
            if not 0 <= k < len(spec.discrete_defaults):
                raise DeclarationError(
                    f"declare_state_output_port({name!r}): System {self.get_system_id_string()} has "
                    f"{len(spec.discrete_defaults)} discrete state group(s); index {k} given."
                )
            size = spec.discrete_defaults[k].shape[0]
            return self._declare_output(name, VECTOR, size, None, lambda ctx: ctx.state.discrete_state.groups[k], False)
        if isinstance(state_index, AbstractStateIndex):
            k = int(state_index)
            if not 0 <= k < len(spec.abstract_defaults):
                raise DeclarationError(
                    f"declare_state_output_port({name!r}): System {self.get_system_id_string()} has "
                    f"{len(spec.abstract_defaults)} abstract state(s); index {k} given."
                )
            return self._declare_output(
                name,
                ABSTRACT,
                0,
                spec.abstract_defaults[k],
                lambda ctx: ctx.state.abstract_state.values[k],
                False,
            )
        if isinstance(state_index, ContinuousStateIndex) or state_index == "continuous":
            if not spec.continuous_declared:
                raise DeclarationError(
                    f"declare_state_output_port({name!r}): System {self.get_system_id_string()} has "
                    f"no continuous state; declare it first."
                )
            n = spec.num_q + spec.num_v + spec.num_z
            return self._declare_output(name, VECTOR, n, None, lambda ctx: ctx.state.continuous_state.x, False)
        raise DeclarationError(
            f"declare_state_output_port({name!r}) on System {self.get_system_id_string()}: expected "
            f"a ContinuousStateIndex, DiscreteStateIndex or AbstractStateIndex; got {state_index!r}."
        )

    # ===== overridable calculations =============================================================
    def do_calc_time_derivatives(self, context: Context) -> Any:
        """Override: return xdot, shape ``(num_q + num_v + num_z,)`` (Drake: ``DoCalcTimeDerivatives``)."""
        if self._spec.num_q + self._spec.num_v + self._spec.num_z == 0:
            return jnp.zeros((0,), context.time.dtype)
        raise MissingOverrideError(
            f"System {self.get_system_id_string()} declares continuous state but does not override "
            f"do_calc_time_derivatives(context)."
        )

    def do_calc_potential_energy(self, context: Context) -> Any:
        """Override: potential energy, J (Drake: ``DoCalcPotentialEnergy``). Default 0."""
        return jnp.zeros((), context.time.dtype)

    def do_calc_kinetic_energy(self, context: Context) -> Any:
        """Override: kinetic energy, J (Drake: ``DoCalcKineticEnergy``). Default 0."""
        return jnp.zeros((), context.time.dtype)

    def do_calc_conservative_power(self, context: Context) -> Any:
        """Override: conservative power, W (Drake: ``DoCalcConservativePower``). Default 0."""
        return jnp.zeros((), context.time.dtype)

    def do_calc_nonconservative_power(self, context: Context) -> Any:
        """Override: non-conservative power, W (Drake: ``DoCalcNonConservativePower``). Default 0."""
        return jnp.zeros((), context.time.dtype)

    def do_map_velocity_to_qdot(self, context: Context, generalized_velocity: jax.Array) -> Any:
        """Override: qdot = N(q) v (Drake: ``DoMapVelocityToQDot``). Default identity (num_q == num_v)."""
        return self._identity_map(generalized_velocity, "do_map_velocity_to_qdot")

    def do_map_qdot_to_velocity(self, context: Context, qdot: jax.Array) -> Any:
        """Override: v = N⁺(q) qdot (Drake: ``DoMapQDotToVelocity``). Default identity (num_q == num_v)."""
        return self._identity_map(qdot, "do_map_qdot_to_velocity")

    def _identity_map(self, vec: jax.Array, what: str) -> jax.Array:
        if self._spec.num_q != self._spec.num_v:
            raise MissingOverrideError(
                f"System {self.get_system_id_string()} has num_q={self._spec.num_q} != "
                f"num_v={self._spec.num_v}, so the identity map does not apply: override {what}."
            )
        return vec

    # ===== System primitives =====================================================================
    def _allocate_context(self, dtype: Any) -> LeafContext:
        spec = self._spec
        sid = self.get_system_id()
        x0 = spec.x0 if spec.x0 is not None else np.zeros(0)
        cs = ContinuousState(jnp.asarray(x0, dtype=dtype), spec.num_q, spec.num_v, spec.num_z, sid)
        dv = DiscreteValues(tuple(jnp.asarray(d, dtype=dtype) for d in spec.discrete_defaults), sid)
        av = AbstractValues(
            tuple(jax.tree_util.tree_map(_as_array_like(dtype), a) for a in spec.abstract_defaults), sid
        )
        params = Parameters(
            tuple(jnp.asarray(p, dtype=dtype) for p in spec.numeric_param_defaults),
            tuple(jax.tree_util.tree_map(_as_array_like(dtype), a) for a in spec.abstract_param_defaults),
            sid,
        )
        return LeafContext(
            jnp.zeros((), dtype),
            State(cs, dv, av, sid),
            params,
            (None,) * self.num_input_ports(),
            sid,
        )

    def _eval_input_raw(self, context: Context, index: int) -> Any:
        value = context.inputs[index]
        if isinstance(value, _Lazy):
            return value.get()
        if isinstance(value, _Raise):
            raise value.error
        if isinstance(value, _Unfed):
            raise PortError(
                f"{value.output_port.get_full_description()} read "
                f"{value.input_port.get_full_description()}, but it was declared without direct "
                f"feedthrough from that input. Declare direct_feedthrough=True (or list the input) "
                f"when declaring the output port."
            )
        if value is None:
            port = self._spec.input_ports[index]
            parent = self._spec.parent
            hint = ""
            if parent is not None and parent._is_input_connected(self, index):
                hint = (
                    f" (it is connected in Diagram {parent.get_path()}: evaluate it through the "
                    f"diagram's context, or get this system's context with "
                    f"diagram.get_subsystem_context(context, system))"
                )
            raise InputPortNotConnectedError(
                f"InputPort.eval(): required {port.get_full_description()} is neither connected "
                f"nor fixed{hint}. Connect it in a DiagramBuilder or give it a value with "
                f"port.fix_value(context, value)."
            )
        return value

    def _calc_output_raw(self, context: Context, index: int) -> Any:
        port = self._spec.output_ports[index]
        value = _call(self, self._spec.output_calcs[index], context)
        return port.check_value(
            value, f"The calc of {port.get_full_description()} returned a value that does not match"
        )

    def _calc_time_derivatives_raw(self, context: Context) -> jax.Array:
        spec = self._spec
        n = spec.num_q + spec.num_v + spec.num_z
        if n == 0:  # no continuous state: the derivative function is never evaluated
            return jnp.zeros((0,), context.time.dtype)
        xdot = self.do_calc_time_derivatives(context)
        if isinstance(xdot, ContinuousState):
            xdot = xdot.x
        xdot = jnp.asarray(xdot)
        if xdot.shape != (n,):
            raise StateError(
                f"do_calc_time_derivatives of System {self.get_system_id_string()} returned shape "
                f"{xdot.shape}; its continuous state has size {n} (num_q={spec.num_q}, "
                f"num_v={spec.num_v}, num_z={spec.num_z}), so the shape must be ({n},)."
            )
        if not (jnp.issubdtype(xdot.dtype, jnp.floating) or jnp.issubdtype(xdot.dtype, jnp.integer)):
            raise StateError(
                f"do_calc_time_derivatives of System {self.get_system_id_string()} returned dtype {xdot.dtype}; "
                f"the derivatives of a real state must be real (casting would drop the imaginary part: declare "
                f"the real and imaginary parts as separate states)."
            )
        x = context.get_continuous_state_vector()
        return xdot.astype(x.dtype)

    def _calc_energy_raw(self, context: Context, which: str) -> jax.Array:
        fn = {
            "potential": self.do_calc_potential_energy,
            "kinetic": self.do_calc_kinetic_energy,
            "conservative_power": self.do_calc_conservative_power,
            "nonconservative_power": self.do_calc_nonconservative_power,
        }[which]
        value = jnp.asarray(fn(context))
        if value.size != 1:
            raise StateError(
                f"do_calc_{which}{'_energy' if which in ('potential', 'kinetic') else ''} of System "
                f"{self.get_system_id_string()} must return a scalar; got shape {value.shape}."
            )
        return jnp.reshape(value, ()).astype(context.time.dtype)

    def _map_raw(self, context: Context, vector: jax.Array, which: str) -> jax.Array:
        spec = self._spec
        if which == "v_to_qdot":
            out = jnp.asarray(self.do_map_velocity_to_qdot(context, vector))
            expected = spec.num_q
        else:
            out = jnp.asarray(self.do_map_qdot_to_velocity(context, vector))
            expected = spec.num_v
        if out.shape != (expected,):
            raise StateError(
                f"{'do_map_velocity_to_qdot' if which == 'v_to_qdot' else 'do_map_qdot_to_velocity'} "
                f"of System {self.get_system_id_string()} returned shape {out.shape}; expected ({expected},)."
            )
        return out

    def _compute_direct_feedthroughs(self) -> frozenset[tuple[int, int]]:
        n_in = self.num_input_ports()
        if n_in == 0:
            return frozenset()
        # Structurally identical leaves (same class, configuration and calc code) have the same
        # feedthrough: trace once per structure, not once per instance.
        try:
            key = leaf_signature(self, include_feedthrough=False)
            hash(key)
        except Exception:  # noqa: BLE001 - unhashable configuration: just trace
            key = ("unique",)
        if key[0] != "unique" and key in _FEEDTHROUGH_CACHE:
            return _FEEDTHROUGH_CACHE[key]
        pairs = self._trace_direct_feedthroughs()
        if key[0] != "unique":
            _FEEDTHROUGH_CACHE[key] = pairs
        return pairs

    def _trace_direct_feedthroughs(self) -> frozenset[tuple[int, int]]:
        n_in = self.num_input_ports()
        pairs: set[tuple[int, int]] = set()
        ctx = placeholders = None  # allocated on the first output that must be traced
        for j, decl in enumerate(self._spec.output_feedthrough):
            declared = self._feedthrough_decl(decl)
            if declared is not None:
                pairs.update((i, j) for i in declared)
                continue
            if ctx is None:
                ctx = self._allocate_context(jnp.float32)
                placeholders = [p.allocate() for p in self._spec.input_ports]

            def out_fn(*inputs: Any, _j: int = j, _ctx: LeafContext = ctx) -> Any:
                return self._calc_output_raw(_ctx._with_inputs(tuple(inputs)), _j)

            deps = jaxpr_dependencies(out_fn, placeholders or [])
            if deps is None:
                deps = [True] * n_in
            pairs.update((i, j) for i in range(n_in) if deps[i])
        return frozenset(pairs)

    def _feedthrough_inputs_of(self, output_index: int) -> frozenset[int]:
        return frozenset(i for i, o in self.get_direct_feedthroughs() if o == output_index)


def _as_array_like(dtype: Any) -> Callable[[Any], Any]:
    def convert(x: Any) -> Any:
        if isinstance(x, (float, np.floating)) or (
            isinstance(x, (np.ndarray, jax.Array)) and jnp.issubdtype(x.dtype, jnp.floating)
        ):
            return as_float_array(x, dtype)
        if isinstance(x, (bool, int, np.ndarray, jax.Array, np.integer, np.bool_)):
            return jnp.asarray(x)
        return x

    return convert


__all__ = [
    "LeafSystem",
    "ContinuousStateIndex",
    "DiscreteStateIndex",
    "AbstractStateIndex",
    "NumericParameterIndex",
    "AbstractParameterIndex",
    "abstract_signature",
]
