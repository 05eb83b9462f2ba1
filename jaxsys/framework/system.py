"""``System``: the abstract base of LeafSystem and Diagram (Drake's ``System<T>``).

A System is an immutable ``equinox.Module``. Its structure (name, ports, state layout, constraints,
events) is static Python data held in a private ``_spec`` object created by the constructor; all
values that vary between runs (time, state, parameters, input values) live in a
[`Context`][jaxsys.Context]. Public methods take a context, check that it was made by this system
(Drake's "System Compatibility"), and return values: nothing is written through output arguments.

Drake's scalar-type templating (``System<double>``, ``System<AutoDiffXd>``, ``ToAutoDiffXd``) has no
counterpart: a jaxsys System works on whatever array type its context holds, and ``jax.grad``,
``jax.jvp``, ``jax.jacfwd`` or ``jax.vmap`` of any function of a context differentiates or batches it.

Imports (within jaxsys): ``constraints``, ``context``, ``errors``, ``graphviz``, ``ids``, ``ports``,
``system_constraints``, ``system_events``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .constraints import SystemConstraint
from .context import (
    Context,
    ContinuousState,
    DiscreteValues,
    State,
    SystemOutput,
    default_float_dtype,
)
from .drake_names import drake_name_error
from .errors import JaxsysError, PortError, StateError
from .graphviz import graphviz_fragment, graphviz_string, input_port_token, output_port_token
from .ids import INVALID_SYSTEM_ID, new_system_id, same_structure, validate_created_for
from .ports import InputPort, OutputPort
from .system_constraints import ConstraintReport as ConstraintReport, SystemConstraints
from .system_events import SystemEvents


class _SystemSpec:
    """Static structure of a System, filled by its constructor. Identity-hashed (never traced).

    Every system has the attributes set in ``__init__``; a leaf's constructor adds its declarations
    and a diagram's its wiring and evaluation plans (annotated here, set there)."""

    # a LeafSystem's declarations (leaf_system.LeafSystem.__init__ and its declare_* methods)
    num_q: int
    num_v: int
    num_z: int
    x0: Any
    continuous_declared: bool
    discrete_defaults: list[Any]
    abstract_defaults: list[Any]
    numeric_param_defaults: list[Any]
    abstract_param_defaults: list[Any]
    output_calcs: list[Any]
    output_feedthrough: list[Any]
    events: list[Any]
    witnesses: list[Any]
    # a Diagram's wiring and evaluation plans (diagram.Diagram)
    connections: dict[Any, Any]
    input_targets: list[Any]
    output_sources: list[Any]
    flat: Any
    resolve_in: Any
    pack_plan: Any
    state_positions: Any
    state_blocks: Any
    groups: Any

    def __init__(self, owner: System, name: str) -> None:
        self.system_id = new_system_id(owner)
        self.name = name
        self.parent: Any = None  # the Diagram this system belongs to, once built
        self.in_builder: Any = None  # the DiagramBuilder it was added to
        self.input_ports: list[InputPort] = []
        self.output_ports: list[OutputPort] = []
        self.constraints: list[SystemConstraint] = []
        self.feedthrough_cache: frozenset[tuple[int, int]] | None = None

    def __repr__(self) -> str:
        return f"<spec of {self.name!r}>"


_STRUCTURAL = frozenset(
    (
        "get_name set_name get_system_id get_system_id_string get_path get_parent num_input_ports "
        "num_output_ports get_input_port get_output_port get_input_port_by_name get_output_port_by_name "
        "has_input_port has_output_port get_direct_feedthroughs has_direct_feedthrough "
        "has_any_direct_feedthrough validate_context num_subsystems get_systems get_subsystem_by_name "
        "get_num_total_inputs get_num_total_outputs"
    ).split()
)


class System(SystemEvents, SystemConstraints):
    """Abstract base of every system (Drake's ``System<T>``). See the module docstring."""

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: Drake's CamelCase names get an error naming ours
        raise drake_name_error(self, name)

    _spec: _SystemSpec = eqx.field(static=True)

    def __init__(self, name: str = "") -> None:
        self._spec = _SystemSpec(self, name)

    def __getattribute__(self, name: str, /) -> Any:
        # equinox wraps every bound method it hands out in a ``BoundMethod`` module, whose
        # construction flattens ``self``: for a Diagram of N subsystems every method access costs
        # O(N), and building or tracing a diagram accesses its methods O(N) times. Private
        # (single-underscore) names are the framework's internals: they get plain bound methods.
        # Public methods keep equinox's behaviour (``jax.jit(system.method)`` works).
        # The structural queries and declarations below take and return no arrays (names, ports,
        # feedthrough, context checks): they get plain bound methods too, since the framework calls
        # them O(N) times while building and tracing a diagram.
        if (name[:1] == "_" and name[:2] != "__") or name in _STRUCTURAL or name[:8] == "declare_":
            return object.__getattribute__(self, name)
        return super().__getattribute__(name)

    # ===== names, ids, paths ===================================================================
    def get_name(self) -> str:
        """The system's name ('' if none was given) (Drake: ``get_name``)."""
        return self._spec.name

    def set_name(self, name: str) -> None:
        """Set the name (Drake: ``set_name``).

        Names are structure: allowed only before the system is added to a DiagramBuilder.
        """
        if self._spec.in_builder is not None or self._spec.parent is not None:
            raise JaxsysError(
                f"set_name({name!r}): System {self.get_path()} has already been added to a "
                f"DiagramBuilder; its name can no longer change."
            )
        self._spec.name = str(name)

    def get_system_id(self) -> int:
        """The unique integer id that contexts and other objects of this system carry."""
        return self._spec.system_id

    def get_parent(self) -> Any:
        """The Diagram that contains this system, or None (Drake: ``get_parent_service``)."""
        return self._spec.parent

    def _root_system(self) -> System:
        s: Any = self
        while s._spec.parent is not None:
            s = s._spec.parent
        return s

    def get_my_context_from_root(self, root_context: Context) -> Context:
        """This system's context inside ``root_context``, the context of the outermost Diagram that
        contains it (or of this system itself, if it is the root). Drake: ``GetMyContextFromRoot``.

        Contexts are values: change the returned context and put it back with
        `set_my_context_in_root` (or do both with `update_my_context_in_root`). Connected
        input ports hold their values at ``root_context`` (snapshots).
        """
        root = self._root_system()
        if root is self:
            self.validate_context(root_context)
            return root_context
        return root.get_subsystem_context(root_context, self)

    def set_my_context_in_root(self, root_context: Context, my_context: Context) -> Context:
        """A copy of ``root_context`` with this system's context replaced by ``my_context`` (the
        functional form of Drake's ``GetMyMutableContextFromRoot``; the root's time is kept)."""
        root = self._root_system()
        if root is self:
            self.validate_context(my_context)
            return my_context
        return root.set_subsystem_context(root_context, self, my_context)

    def update_my_context_in_root(self, root_context: Context, fn: Callable[[Context], Context]) -> Context:
        """``set_my_context_in_root(root_context, fn(get_my_context_from_root(root_context)))``: change
        this system's part of a root context in one call, e.g.
        ``ctx = plant.update_my_context_in_root(ctx, lambda c: c.with_continuous_state(x0))``
        (pydrake: ``plant.GetMyMutableContextFromRoot(ctx).SetContinuousState(x0)``)."""
        return self.set_my_context_in_root(root_context, fn(self.get_my_context_from_root(root_context)))

    def get_path(self) -> str:
        """The full path in the tree of systems, e.g. ``::diagram::plant`` (Drake: ``GetPath``).

        An empty name shows as ``_``, as in Drake.
        """
        parts = []
        s: Any = self
        while s is not None:
            parts.append(s.get_name() or "_")
            s = s._spec.parent
        return "::" + "::".join(reversed(parts))

    def get_system_id_string(self) -> str:
        """A string identifying this system in error messages: its path and type (Drake: ``GetSystemIdString``)."""
        return f"{self.get_path()} ({type(self).__name__})"

    def get_memory_object_name(self) -> str:
        """Type name and a unique number, e.g. ``jaxsys/Adder@000042`` (Drake: ``GetMemoryObjectName``).

        Drake uses the memory address; jaxsys uses the system id, which is stable in a process.
        """
        return f"{type(self).__module__.split('.')[0]}/{type(self).__name__}@{self.get_system_id():06d}"

    # ===== ports ===============================================================================
    def num_input_ports(self) -> int:
        """Number of input ports (Drake: ``num_input_ports``)."""
        return len(self._spec.input_ports)

    def num_output_ports(self) -> int:
        """Number of output ports (Drake: ``num_output_ports``)."""
        return len(self._spec.output_ports)

    get_num_input_ports = num_input_ports
    get_num_output_ports = num_output_ports

    def _get_port(self, ports: Sequence[Any], which: int | str | None, kind: str) -> Any:
        if which is None:
            if len(ports) != 1:
                raise PortError(
                    f"get_{kind}_port(): System {self.get_system_id_string()} has {len(ports)} "
                    f"{kind} ports; give an index or a name."
                )
            return ports[0]
        if isinstance(which, str):
            for p in ports:
                if p.get_name() == which:
                    return p
            names = [p.get_name() for p in ports]
            raise PortError(
                f"System {self.get_system_id_string()} has no {kind} port named {which!r}; "
                f"its {kind} ports are {names}."
            )
        idx = int(which)
        if not 0 <= idx < len(ports):
            raise PortError(
                f"System {self.get_system_id_string()} has {len(ports)} {kind} port(s); index {idx} is out of range."
            )
        return ports[idx]

    def get_input_port(self, port: int | str | None = None) -> InputPort:
        """Input port by index or name; with no argument, the only one (Drake: ``get_input_port``)."""
        return self._get_port(self._spec.input_ports, port, "input")

    def get_output_port(self, port: int | str | None = None) -> OutputPort:
        """Output port by index or name; with no argument, the only one (Drake: ``get_output_port``)."""
        return self._get_port(self._spec.output_ports, port, "output")

    def has_input_port(self, name: str) -> bool:
        """Drake: ``HasInputPort``."""
        return any(p.get_name() == name for p in self._spec.input_ports)

    def has_output_port(self, name: str) -> bool:
        """Drake: ``HasOutputPort``."""
        return any(p.get_name() == name for p in self._spec.output_ports)

    def get_input_port_by_name(self, name: str) -> InputPort:
        """Alias of ``get_input_port(name)``."""
        return self.get_input_port(name)

    def get_output_port_by_name(self, name: str) -> OutputPort:
        """Alias of ``get_output_port(name)``."""
        return self.get_output_port(name)

    def get_num_total_inputs(self) -> int:
        """Total size of all vector input ports, as if muxed (Drake: ``num_total_inputs``)."""
        return sum(p.size() for p in self._spec.input_ports)

    def get_num_total_outputs(self) -> int:
        """Total size of all vector output ports, as if muxed (Drake: ``num_total_outputs``)."""
        return sum(p.size() for p in self._spec.output_ports)

    num_total_inputs = get_num_total_inputs
    num_total_outputs = get_num_total_outputs

    # ===== resource allocation and defaults ====================================================
    @abc.abstractmethod
    def _allocate_context(self, dtype: Any) -> Context:
        """A context holding this system's default values, with floats of ``dtype``."""

    def create_default_context(self, dtype: Any = None) -> Context:
        """A new context holding default time (0), state and parameters (Drake: ``CreateDefaultContext``).

        **Arguments:**
        - `dtype`: floating dtype of all values (default: float64 with ``jax_enable_x64``, else float32).
          An integer or complex dtype is an error: time and state are real numbers.
        """
        if dtype is not None and not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
            raise JaxsysError(
                f"create_default_context: System {self.get_system_id_string()}: dtype must be a real floating "
                f"dtype (jnp.float32 or jnp.float64); got {jnp.dtype(dtype).name}. Time and state are real "
                f"numbers: integrate a complex state as its real and imaginary parts."
            )
        return self._allocate_context(dtype or default_float_dtype())

    def allocate_context(self, dtype: Any = None) -> Context:
        """Same as `create_default_context` (Drake: ``AllocateContext``).

        Allocation and setting defaults are one step in jaxsys.
        """
        return self.create_default_context(dtype)

    def set_default_context(self, context: Context) -> Context:
        """``context`` with default state and parameters; time and fixed inputs are kept.

        Drake: ``SetDefaultContext`` / ``SetDefaults``.
        """
        self.validate_context(context)
        default = self._allocate_context(context.time.dtype)
        ctx = context.with_state(default.get_state()).with_parameters(default.get_parameters())
        return ctx

    set_defaults = set_default_context

    def set_default_state(self, context: Context) -> State:
        """The default State for this system (Drake: ``SetDefaultState``, returning the state)."""
        self.validate_context(context)
        return self._allocate_context(context.time.dtype).get_state()

    def set_default_parameters(self, context: Context) -> Any:
        """The default Parameters (Drake: ``SetDefaultParameters``, returning them)."""
        self.validate_context(context)
        return self._allocate_context(context.time.dtype).get_parameters()

    def allocate_time_derivatives(self) -> ContinuousState:
        """A zero ContinuousState shaped like this system's (Drake: ``AllocateTimeDerivatives``)."""
        cs = self.create_default_context().get_continuous_state()
        return ContinuousState(jnp.zeros_like(cs.x), cs.num_q, cs.num_v, cs.num_z, self.get_system_id())

    def allocate_discrete_variables(self) -> DiscreteValues:
        """Zero DiscreteValues shaped like this system's (Drake: ``AllocateDiscreteVariables``)."""
        dv = self.create_default_context().get_discrete_state()
        return DiscreteValues(tuple(jnp.zeros_like(g) for g in dv.groups), self.get_system_id())

    def allocate_output(self) -> SystemOutput:
        """A SystemOutput of zero values, one per output port (Drake: ``AllocateOutput``)."""
        return SystemOutput(tuple(p.allocate() for p in self._spec.output_ports), self.get_system_id())

    def allocate_input_vector(self, port: InputPort) -> jax.Array:
        """A zero vector for a vector input port (Drake: ``AllocateInputVector``)."""
        self._check_own_port(port)
        if port.is_abstract():
            raise PortError(f"allocate_input_vector: {port.get_full_description()} is abstract.")
        return port.allocate()

    def allocate_input_abstract(self, port: InputPort) -> Any:
        """A model value for an abstract input port (Drake: ``AllocateInputAbstract``)."""
        self._check_own_port(port)
        if not port.is_abstract():
            raise PortError(f"allocate_input_abstract: {port.get_full_description()} is a vector port.")
        return port.allocate()

    def allocate_freestanding_inputs(self, context: Context) -> Context:
        """``context`` with a zero value fixed on every input port (Drake: ``AllocateFreestandingInputs``)."""
        self.validate_context(context)
        for p in self._spec.input_ports:
            context = p.fix_value(context, p.allocate())
        return context

    def _check_own_port(self, port: Any) -> None:
        if port.get_system() is not self:
            raise PortError(f"{port.get_full_description()} does not belong to System {self.get_system_id_string()}.")

    # ===== compatibility =======================================================================
    def validate_context(self, context: Any) -> None:
        """Raise [`SystemMismatchError`][jaxsys.SystemMismatchError] unless ``context`` was made by this system.

        Drake: ``ValidateContext`` / ``ValidateCreatedForThisSystem``.
        """
        if not isinstance(context, Context):
            raise JaxsysError(f"System {self.get_system_id_string()} expected a Context, got {type(context).__name__}.")
        validate_created_for(self, context, "Context")

    def check_valid_context(self, context: Context) -> None:
        """Check that ``context`` belongs to this system and has its structure (Drake: ``CheckValidContext``)."""
        self.validate_context(context)
        ref = self._allocate_context(context.time.dtype)
        if not same_structure(jax.tree_util.tree_structure(ref), jax.tree_util.tree_structure(context)):
            raise StateError(
                f"The Context given to System {self.get_system_id_string()} does not have the "
                f"structure of the context it creates."
            )

    def check_valid_output(self, output: SystemOutput) -> None:
        """Check that ``output`` belongs to this system and matches its ports (Drake: ``CheckValidOutput``)."""
        validate_created_for(self, output, "SystemOutput")
        if output.num_ports() != self.num_output_ports():
            raise PortError(
                f"SystemOutput has {output.num_ports()} values; System {self.get_system_id_string()} "
                f"has {self.num_output_ports()} output ports."
            )
        for p, v in zip(self._spec.output_ports, output.values):
            p.check_value(v, "check_valid_output")

    # ===== evaluation primitives (implemented by LeafSystem and Diagram) ========================
    @abc.abstractmethod
    def _eval_input_raw(self, context: Context, index: int) -> Any:
        """Value of input port ``index`` in ``context`` (no validation)."""

    @abc.abstractmethod
    def _calc_output_raw(self, context: Context, index: int) -> Any:
        """Value of output port ``index`` (no validation)."""

    @abc.abstractmethod
    def _calc_time_derivatives_raw(self, context: Context) -> jax.Array:
        """xdot in this system's continuous-state ordering (no validation)."""

    def _derivative_function(self, context: Context) -> Callable[[jax.Array, jax.Array], jax.Array]:
        """``f(t, x) -> xdot`` (this system's state ordering), the rest taken from ``context``.

        Called once before a simulation loop; a Diagram prepares compact stacked data here so the
        loop does not capture every leaf's context.
        """

        def f(t: jax.Array, x: jax.Array) -> jax.Array:
            return self._calc_time_derivatives_raw(context.with_time(t).with_continuous_state(x))

        return f

    @abc.abstractmethod
    def _calc_energy_raw(self, context: Context, which: str) -> jax.Array:
        """One of 'potential', 'kinetic', 'conservative_power', 'nonconservative_power'."""

    @abc.abstractmethod
    def _map_raw(self, context: Context, vector: jax.Array, which: str) -> jax.Array:
        """'v_to_qdot' or 'qdot_to_v'."""

    @abc.abstractmethod
    def _compute_direct_feedthroughs(self) -> frozenset[tuple[int, int]]:
        """All (input index, output index) pairs with direct feedthrough."""

    # ===== input evaluation ====================================================================
    def eval_vector_input(self, context: Context, port_index: int) -> jax.Array:
        """Value of vector input port ``port_index`` (Drake: ``EvalVectorInput`` / ``EvalEigenVectorInput``)."""
        port = self.get_input_port(port_index)
        if port.is_abstract():
            raise PortError(f"eval_vector_input: {port.get_full_description()} is abstract.")
        return port.eval(context)

    eval_eigen_vector_input = eval_vector_input

    def eval_abstract_input(self, context: Context, port_index: int) -> Any:
        """Value of input port ``port_index``, vector or abstract (Drake: ``EvalAbstractInput``)."""
        return self.get_input_port(port_index).eval(context)

    eval_input_value = eval_abstract_input

    # ===== direct feedthrough ===================================================================
    def get_direct_feedthroughs(self) -> frozenset[tuple[int, int]]:
        """All (input port index, output port index) pairs with direct feedthrough.

        Declared where the system declared it; otherwise found by tracing the output calc
        (see `jaxsys.framework.feedthrough`). Drake: ``GetDirectFeedthroughs``.
        """
        if self._spec.feedthrough_cache is None:
            self._spec.feedthrough_cache = frozenset(self._compute_direct_feedthroughs())
        return self._spec.feedthrough_cache

    def has_any_direct_feedthrough(self) -> bool:
        """Drake: ``HasAnyDirectFeedthrough``."""
        return bool(self.get_direct_feedthroughs())

    def has_direct_feedthrough(self, input_port: int | None = None, output_port: int | None = None) -> bool:
        """Whether input -> output has direct feedthrough (Drake: ``HasDirectFeedthrough``).

        ``has_direct_feedthrough(output_port=j)`` asks about any input; ``has_direct_feedthrough(i, j)``
        about one pair. A single positional argument is the *output* port, as in Drake.
        """
        if output_port is None:
            if input_port is None:
                raise PortError("has_direct_feedthrough: give an output port index.")
            output_port, input_port = input_port, None
        pairs = self.get_direct_feedthroughs()
        if input_port is None:
            return any(o == output_port for _, o in pairs)
        return (int(input_port), int(output_port)) in pairs

    # ===== calculations ========================================================================
    def calc_time_derivatives(self, context: Context) -> ContinuousState:
        """d/dt of the continuous state (Drake: ``CalcTimeDerivatives``; returned, not written)."""
        self.validate_context(context)
        cs = context.get_continuous_state()
        xdot = self._calc_time_derivatives_raw(context)
        return ContinuousState(xdot, cs.num_q, cs.num_v, cs.num_z, self.get_system_id())

    eval_time_derivatives = calc_time_derivatives

    def calc_output(self, context: Context) -> SystemOutput:
        """Values of every output port (Drake: ``CalcOutput``)."""
        self.validate_context(context)
        return SystemOutput(
            tuple(self._calc_output_raw(context, i) for i in range(self.num_output_ports())),
            self.get_system_id(),
        )

    def calc_potential_energy(self, context: Context) -> jax.Array:
        """Potential energy in J (Drake: ``CalcPotentialEnergy``); 0 for non-physical systems."""
        self.validate_context(context)
        return self._calc_energy_raw(context, "potential")

    def calc_kinetic_energy(self, context: Context) -> jax.Array:
        """Kinetic energy in J (Drake: ``CalcKineticEnergy``); 0 for non-physical systems."""
        self.validate_context(context)
        return self._calc_energy_raw(context, "kinetic")

    def calc_conservative_power(self, context: Context) -> jax.Array:
        """Rate of conversion of potential to kinetic energy, W (Drake: ``CalcConservativePower``)."""
        self.validate_context(context)
        return self._calc_energy_raw(context, "conservative_power")

    def calc_nonconservative_power(self, context: Context) -> jax.Array:
        """Rate of energy generated (>0) or dissipated (<0) otherwise, W (Drake: ``CalcNonConservativePower``)."""
        self.validate_context(context)
        return self._calc_energy_raw(context, "nonconservative_power")

    # Drake's cached evaluations: tracing makes caching unnecessary, so Eval* = Calc*.
    eval_potential_energy = calc_potential_energy
    eval_kinetic_energy = calc_kinetic_energy
    eval_conservative_power = calc_conservative_power
    eval_nonconservative_power = calc_nonconservative_power

    # ===== the evaluation interface of simulation loops and integrators =============================
    def vector_field(self, context: Context) -> Callable[[jax.Array, jax.Array], jax.Array]:
        """``f(t, x) -> xdot``: the time derivatives of the continuous state as a pure function of time
        (s, a scalar) and the continuous state vector (shape ``(n,)``, this system's ordering, as
        ``context.get_continuous_state_vector()``), everything else (parameters, discrete and abstract
        state, fixed inputs) taken from ``context``: the ODE an integrator steps (Drake's integrators
        reach it through ``CalcTimeDerivatives``). Prepare it once per loop: a Diagram packs its
        leaves' data here so that calling ``f`` does not touch every leaf's context."""
        return self._derivative_function(context)

    def velocity_to_qdot(self, context: Context, v: jax.Array) -> jax.Array:
        """qdot = N(q) v at ``context`` (Drake: ``MapVelocityToQDot``) without the eager shape check of
        `map_velocity_to_qdot`: the form a loop or an integrator calls on traced values."""
        return self._map_raw(context, v, "v_to_qdot")

    def qdot_to_velocity(self, context: Context, qdot: jax.Array) -> jax.Array:
        """v = N⁺(q) qdot at ``context`` (Drake: ``MapQDotToVelocity``) without the eager shape check of
        `map_qdot_to_velocity`: the form a loop or an integrator calls on traced values."""
        return self._map_raw(context, qdot, "qdot_to_v")

    def map_velocity_to_qdot(self, context: Context, generalized_velocity: Any) -> jax.Array:
        """qdot = N(q) v (Drake: ``MapVelocityToQDot``); identity unless the system overrides it."""
        self.validate_context(context)
        v = jnp.asarray(generalized_velocity)
        nv = context.get_continuous_state().num_v
        if v.shape != (nv,):
            raise StateError(
                f"map_velocity_to_qdot: System {self.get_system_id_string()} has num_v={nv}; "
                f"the velocity given has shape {v.shape}."
            )
        return self._map_raw(context, v, "v_to_qdot")

    def map_qdot_to_velocity(self, context: Context, qdot: Any) -> jax.Array:
        """v = N⁺(q) qdot (Drake: ``MapQDotToVelocity``); identity unless the system overrides it."""
        self.validate_context(context)
        qd = jnp.asarray(qdot)
        nq = context.get_continuous_state().num_q
        if qd.shape != (nq,):
            raise StateError(
                f"map_qdot_to_velocity: System {self.get_system_id_string()} has num_q={nq}; "
                f"the qdot given has shape {qd.shape}."
            )
        return self._map_raw(context, qd, "qdot_to_v")

    # ===== utilities ===========================================================================
    def copy_continuous_state_vector(self, context: Context) -> jax.Array:
        """A copy of the continuous state vector xc (Drake: ``CopyContinuousStateVector``)."""
        self.validate_context(context)
        return jnp.array(context.get_continuous_state_vector(), copy=True)

    def fix_input_ports_from(self, other_system: System, other_context: Context, target_context: Context) -> Context:
        """Fix every input port of ``target_context`` to its value in ``other_context``.

        The two systems must have the same ports (e.g. the same model built twice, or one for
        another dtype). Returns the new target context (Drake: ``FixInputPortsFrom``).
        """
        self.validate_context(target_context)
        other_system.validate_context(other_context)
        if other_system.num_input_ports() != self.num_input_ports():
            raise PortError(
                f"fix_input_ports_from: System {other_system.get_system_id_string()} has "
                f"{other_system.num_input_ports()} input ports, System {self.get_system_id_string()} "
                f"has {self.num_input_ports()}."
            )
        dtype = target_context.time.dtype
        for mine, theirs in zip(self._spec.input_ports, other_system._spec.input_ports):
            try:
                value = theirs.eval(other_context)
            except PortError:
                continue
            value = jax.tree_util.tree_map(
                lambda x: jnp.asarray(x, dtype) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating) else x,
                value,
            )
            target_context = mine.fix_value(target_context, value)
        return target_context

    # ===== graphviz ============================================================================
    def get_graphviz_id(self) -> int:
        """An integer unique to this system in Graphviz output (Drake: ``GetGraphvizId``)."""
        return self.get_system_id()

    def get_graphviz_string(self, max_depth: int = 1_000_000) -> str:
        """A Graphviz ``dot`` description of this system (Drake: ``GetGraphvizString``).

        Render it with ``dot -Tsvg`` or [`plot_system`][jaxsys.plot_system]. ``max_depth`` limits how many
        levels of nested diagrams are expanded.
        """
        return graphviz_string(self, max_depth)

    def get_graphviz_fragment(self, max_depth: int = 1_000_000) -> list[str]:
        """The lines of this system's node (or cluster) in a Graphviz graph (Drake: ``GetGraphvizFragment``)."""
        return graphviz_fragment(self, max_depth)

    def get_graphviz_input_port_token(self, port: InputPort, max_depth: int = 1_000_000) -> str:
        """The Graphviz node:port token of an input port (Drake: ``GetGraphvizInputPortToken``)."""
        return input_port_token(self, port.get_index(), max_depth)

    def get_graphviz_output_port_token(self, port: OutputPort, max_depth: int = 1_000_000) -> str:
        """The Graphviz node:port token of an output port (Drake: ``GetGraphvizOutputPortToken``)."""
        return output_port_token(self, port.get_index(), max_depth)

    # ===== scalar conversion ===================================================================
    def to_autodiff_xd(self) -> System:
        """Returns this system: no conversion is needed to differentiate it (Drake: ``ToAutoDiffXd``).

        Drake re-instantiates a system with an autodiff scalar type. In jaxsys the same system is
        differentiated by tracing: apply ``jax.grad``, ``jax.jvp`` or ``jax.jacfwd`` to any function
        of a context (its state, parameters, inputs or time).
        """
        return self

    def to_autodiff_xd_maybe(self) -> System:
        """Same as `to_autodiff_xd` (every jaxsys system supports it)."""
        return self

    def to_symbolic(self) -> System:
        """Returns this system (Drake: ``ToSymbolic``).

        The symbolic view of a jaxsys computation is its jaxpr: for example
        ``jax.make_jaxpr(lambda c: system.calc_time_derivatives(c).x)(context)``.
        """
        return self

    def to_symbolic_maybe(self) -> System:
        """Same as `to_symbolic`."""
        return self

    def to_scalar_type(self, dtype: Any = None) -> System:
        """Returns this system: the dtype is chosen by the context (``create_default_context(dtype)``).

        Drake: ``ToScalarType<U>``.
        """
        return self

    def get_system_scalar_converter(self) -> None:
        """There is no scalar converter in jaxsys (Drake: ``get_system_scalar_converter``); returns None."""
        return None

    # ===== misc ================================================================================
    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.get_name()!r}, path={self.get_path()!r})"


__all__ = ["System", "ConstraintReport", "INVALID_SYSTEM_ID"]
