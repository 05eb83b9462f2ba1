"""``DiagramBuilder``: wire systems into a Diagram (Drake's ``DiagramBuilder<T>``).

Imports (within jaxsys): ``diagram``, ``errors``, ``ports``, ``system``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .diagram import Diagram
from .drake_names import drake_name_error
from .errors import DiagramBuildError
from .ports import ABSTRACT, InputPort, OutputPort, abstract_signature, abstract_value_kinds
from .system import System


S = TypeVar("S", bound=System)


class DiagramBuilder:
    """Collects systems and connections, then `build` makes an immutable [`Diagram`][jaxsys.Diagram].

    Mirrors Drake's DiagramBuilder: ``add_system``, ``add_named_system``, ``connect``,
    ``export_input``, ``export_output``, ``connect_input``, ``build``. Mistakes are reported when
    they are made (or at ``build``), naming the systems and ports involved.
    """

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: Drake's CamelCase names get an error naming ours
        raise drake_name_error(self, name)

    def __init__(self) -> None:
        self.systems: list[System] = []
        self._index: dict[int, int] = {}  # system id -> position
        self._by_name: dict[str, int] = {}  # name -> position (names are frozen once added)
        self.connections: dict[tuple[int, int], tuple[int, int]] = {}
        self.exported_inputs: list[tuple[str, list[tuple[int, int]]]] = []
        self.exported_outputs: list[tuple[str, tuple[int, int]]] = []
        self._built = False

    # ----------------------------------------------------------------------------------------
    def _check_not_built(self, what: str) -> None:
        if self._built:
            raise DiagramBuildError(
                f"DiagramBuilder.{what}: build() has already been called; a builder makes one Diagram."
            )

    def add_system(self, system: S) -> S:
        """Add ``system``; returns it (Drake: ``AddSystem``).

        An unnamed system is named after its type (``Adder``, then ``Adder_1``, ...).
        """
        self._check_not_built("add_system")
        if not isinstance(system, System):
            raise DiagramBuildError(f"DiagramBuilder.add_system expects a System, got {type(system).__name__}.")
        spec = system._spec
        if spec.in_builder is not None or spec.parent is not None:
            where = "this DiagramBuilder" if spec.in_builder is self else "another DiagramBuilder or Diagram"
            raise DiagramBuildError(
                f"DiagramBuilder.add_system: System {system.get_system_id_string()} has already been "
                f"added to {where}; a system can belong to one diagram only (build a second instance)."
            )
        if not system.get_name():
            base = type(system).__name__
            name, n = base, 0
            while self.has_system(name):
                n += 1
                name = f"{base}_{n}"
            spec.name = name
        elif self.has_system(system.get_name()):
            other = self.get_system(system.get_name())
            raise DiagramBuildError(
                f"DiagramBuilder.add_system: a subsystem named {system.get_name()!r} "
                f"({type(other).__name__}) is already in this builder; subsystem names must be unique "
                f"(the new one is a {type(system).__name__})."
            )
        spec.in_builder = self
        self._index[system.get_system_id()] = len(self.systems)
        self._by_name[spec.name] = len(self.systems)
        self.systems.append(system)
        return system

    def add_named_system(self, name: str, system: S) -> S:
        """Set ``system``'s name and add it (Drake: ``AddNamedSystem``)."""
        system.set_name(name)
        return self.add_system(system)

    def has_system(self, name: str) -> bool:
        """True if a system named ``name`` was added (Drake: ``HasSubsystemNamed``)."""
        return name in self._by_name

    def get_system(self, name: str) -> System:
        """The system named ``name`` (Drake: ``GetSubsystemByName``)."""
        if name in self._by_name:
            return self.systems[self._by_name[name]]
        raise DiagramBuildError(f"DiagramBuilder has no system named {name!r}.")

    get_subsystem_by_name = get_system

    def get_systems(self) -> list[System]:
        """The systems added so far (Drake: ``GetSystems``)."""
        return list(self.systems)

    def num_input_ports(self) -> int:
        """Number of exported inputs so far."""
        return len(self.exported_inputs)

    def num_output_ports(self) -> int:
        """Number of exported outputs so far."""
        return len(self.exported_outputs)

    # ----------------------------------------------------------------------------------------
    def _locate(self, port: Any, what: str) -> tuple[int, int]:
        system = port.get_system()
        pos = self._index.get(system.get_system_id())
        if pos is None or self.systems[pos] is not system:
            raise DiagramBuildError(
                f"DiagramBuilder.{what}: {port.get_full_description()} belongs to a System that was "
                f"not added to this DiagramBuilder; add_system() it first. {self._added_summary()}"
            )
        return pos, port.get_index()

    def _added_summary(self, limit: int = 20) -> str:
        """'Systems added so far: a (Adder), b (Gain), ...' (at most ``limit`` named)."""
        if not self.systems:
            return "No system has been added yet."
        names = [f"{s._spec.name} ({type(s).__name__})" for s in self.systems[:limit]]
        more = f", ... ({len(self.systems) - limit} more)" if len(self.systems) > limit else ""
        return f"Systems added so far: {', '.join(names)}{more}."

    def _describe_in_builder(self, port: Any) -> str:
        return port.get_full_description()

    def _input_taken(self, key: tuple[int, int]) -> str | None:
        if key in self.connections:
            so, oo = self.connections[key]
            return f"connected to {self.systems[so].get_output_port(oo).get_full_description()}"
        for name, targets in self.exported_inputs:
            if key in targets:
                return f"exported as the diagram input port {name!r}"
        return None

    @staticmethod
    def _check_compatible(src: Any, dst: Any, what: str) -> None:
        if src.get_data_type() != dst.get_data_type():
            raise DiagramBuildError(
                f"DiagramBuilder.{what}: cannot connect {src.get_full_description()} "
                f"({src.describe_type()}) to {dst.get_full_description()} ({dst.describe_type()}): "
                f"one is vector-valued and the other abstract."
            )
        if src.get_data_type() == ABSTRACT:
            if abstract_signature(src.get_model()) != abstract_signature(dst.get_model()):
                raise DiagramBuildError(
                    f"DiagramBuilder.{what}: mismatched abstract types while connecting "
                    f"{src.get_full_description()} ({src.describe_type()}) to "
                    f"{dst.get_full_description()} ({dst.describe_type()})."
                )
            kinds_src, kinds_dst = abstract_value_kinds(src.get_model()), abstract_value_kinds(dst.get_model())
            if kinds_src != kinds_dst:
                raise DiagramBuildError(
                    f"DiagramBuilder.{what}: mismatched value types while connecting "
                    f"{src.get_full_description()} (leaf types {list(kinds_src)}) to "
                    f"{dst.get_full_description()} (leaf types {list(kinds_dst)}); Drake: 'Mismatched value types'. "
                    f"Declare both ports with models of the same dtypes (or convert in a block between them)."
                )
        elif src.size() != dst.size():
            raise DiagramBuildError(
                f"DiagramBuilder.{what}: mismatched vector sizes while connecting "
                f"{src.get_full_description()} (size {src.size()}) to "
                f"{dst.get_full_description()} (size {dst.size()})."
            )

    def connect(self, src: OutputPort | System, dest: InputPort | System) -> None:
        """Connect an output port to an input port (Drake: ``Connect``).

        Also accepts two systems, each with exactly one port of the needed direction.
        """
        self._check_not_built("connect")
        if isinstance(src, System):
            src = src.get_output_port()
        if isinstance(dest, System):
            dest = dest.get_input_port()
        if not isinstance(src, OutputPort) or not isinstance(dest, InputPort):
            raise DiagramBuildError(
                f"DiagramBuilder.connect(output_port, input_port): got ({type(src).__name__}, {type(dest).__name__})."
            )
        out_key = self._locate(src, "connect")
        in_key = self._locate(dest, "connect")
        taken = self._input_taken(in_key)
        if taken is not None:
            raise DiagramBuildError(
                f"DiagramBuilder.connect: {dest.get_full_description()} is already {taken}; an input "
                f"port takes one source (cannot also connect {src.get_full_description()})."
            )
        self._check_compatible(src, dest, "connect")
        self.connections[in_key] = out_key

    def export_input(self, input_port: InputPort, name: str | None = None) -> int:
        """Make ``input_port`` an input port of the diagram; returns its index (Drake: ``ExportInput``).

        The default name is ``<system name>_<port name>``.
        """
        self._check_not_built("export_input")
        key = self._locate(input_port, "export_input")
        taken = self._input_taken(key)
        if taken is not None:
            raise DiagramBuildError(
                f"DiagramBuilder.export_input: {input_port.get_full_description()} is already {taken}."
            )
        if name is None:
            name = f"{input_port.get_system().get_name()}_{input_port.get_name()}"
        if any(n == name for n, _ in self.exported_inputs):
            raise DiagramBuildError(
                f"DiagramBuilder.export_input: the diagram already has an input port named {name!r}; "
                f"use connect_input({name!r}, port) to feed it to another port too."
            )
        self.exported_inputs.append((name, [key]))
        return len(self.exported_inputs) - 1

    def connect_input(self, diagram_port: str | int, input_port: InputPort) -> None:
        """Feed an already exported diagram input to another subsystem input (Drake: ``ConnectInput``)."""
        self._check_not_built("connect_input")
        key = self._locate(input_port, "connect_input")
        if isinstance(diagram_port, str):
            matches = [i for i, (n, _) in enumerate(self.exported_inputs) if n == diagram_port]
            if not matches:
                raise DiagramBuildError(
                    f"DiagramBuilder.connect_input: no exported input named {diagram_port!r}; "
                    f"exported inputs are {[n for n, _ in self.exported_inputs]}."
                )
            k = matches[0]
        else:
            k = int(diagram_port)
        taken = self._input_taken(key)
        if taken is not None:
            raise DiagramBuildError(
                f"DiagramBuilder.connect_input: {input_port.get_full_description()} is already {taken}."
            )
        first = self.exported_inputs[k][1][0]
        self._check_compatible(self.systems[first[0]].get_input_port(first[1]), input_port, "connect_input")
        self.exported_inputs[k][1].append(key)

    def export_output(self, output_port: OutputPort, name: str | None = None) -> int:
        """Make ``output_port`` an output port of the diagram; returns its index (Drake: ``ExportOutput``)."""
        self._check_not_built("export_output")
        key = self._locate(output_port, "export_output")
        if name is None:
            name = f"{output_port.get_system().get_name()}_{output_port.get_name()}"
        if any(n == name for n, _ in self.exported_outputs):
            raise DiagramBuildError(
                f"DiagramBuilder.export_output: the diagram already has an output port named {name!r}."
            )
        self.exported_outputs.append((name, key))
        return len(self.exported_outputs) - 1

    def is_connected_or_exported(self, input_port: InputPort) -> bool:
        """Drake: ``IsConnectedOrExported``."""
        return self._input_taken(self._locate(input_port, "is_connected_or_exported")) is not None

    # ----------------------------------------------------------------------------------------
    def build(self, name: str = "") -> Diagram:
        """Make the Diagram (Drake: ``Build``). Checks names and algebraic loops.

        **Arguments:**
        - `name`: the diagram's name (also settable with ``set_name`` before it is nested).
        """
        self._check_not_built("build")
        if not self.systems:
            raise DiagramBuildError("DiagramBuilder.build: no systems were added.")
        names = [s.get_name() for s in self.systems]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise DiagramBuildError(f"DiagramBuilder.build: duplicate subsystem names {dups}.")
        diagram = Diagram(self, name)
        for s in self.systems:
            s._spec.parent = diagram
            s._spec.in_builder = None
        try:
            diagram._check_algebraic_loops()
        except Exception:
            for s in self.systems:
                s._spec.parent = None
                s._spec.in_builder = self
            raise
        self._built = True
        return diagram
