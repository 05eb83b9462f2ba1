"""Graphviz ``dot`` text for systems and diagrams (Drake's ``GetGraphvizString``).

A leaf is a record node with its input ports on the left and output ports on the right; a diagram
is a cluster holding its subsystems, with one edge per connection and small nodes for its exported
ports. Names are escaped, so any port or system name gives valid dot.

Imports (within jaxsys): ``system``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from .system import System


def _esc(text: str) -> str:
    out = []
    for ch in text:
        if ch in '{}|<>"\\ ':
            out.append("\\" + ch if ch != " " else " ")
        else:
            out.append(ch)
    return "".join(out)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _is_diagram(system: System) -> bool:
    return hasattr(system, "subsystems")


def _node(system: System) -> str:
    return f"s{system.get_graphviz_id()}"


def input_port_token(system: System, index: int, max_depth: int) -> str:
    """The dot token an edge into input port ``index`` of ``system`` should target."""
    if _is_diagram(system) and max_depth > 0:
        return f"{_node(system)}_u{index}"
    return f"{_node(system)}:u{index}"


def output_port_token(system: System, index: int, max_depth: int) -> str:
    """The dot token an edge from output port ``index`` of ``system`` should start at."""
    if _is_diagram(system) and max_depth > 0:
        return f"{_node(system)}_y{index}"
    return f"{_node(system)}:y{index}"


def graphviz_fragment(system: System, max_depth: int) -> list[str]:
    """dot lines describing ``system`` (a record node, or a cluster for a diagram)."""
    name = system.get_name() or "_"
    if not _is_diagram(system) or max_depth <= 0:
        ins = "|".join(f"<u{p.get_index()}> {_esc(p.get_name())}" for p in system._spec.input_ports)
        outs = "|".join(f"<y{p.get_index()}> {_esc(p.get_name())}" for p in system._spec.output_ports)
        title = f"{_esc(name)}\\n{_esc(type(system).__name__)}"
        label = "{" + "{" + ins + "}|" + title + "|{" + outs + "}" + "}"
        return [f"{_node(system)} [shape=record, label={_quote(label)}];"]
    lines = [
        f"subgraph cluster{system.get_graphviz_id()} {{",
        f"label={_quote(name)};",
        "style=rounded;",
    ]
    for p in system._spec.input_ports:
        lines.append(f"{_node(system)}_u{p.get_index()} [shape=ellipse, style=dashed, label={_quote(p.get_name())}];")
    for q in system._spec.output_ports:
        lines.append(f"{_node(system)}_y{q.get_index()} [shape=ellipse, style=dashed, label={_quote(q.get_name())}];")
    subs = system.subsystems
    for s in subs:
        lines.extend(graphviz_fragment(s, max_depth - 1))
    spec = system._spec
    for (si, ii), (so, oo) in spec.connections.items():
        lines.append(
            f"{output_port_token(subs[so], oo, max_depth - 1)} -> {input_port_token(subs[si], ii, max_depth - 1)};"
        )
    for k, targets in enumerate(spec.input_targets):
        for si, ii in targets:
            lines.append(f"{_node(system)}_u{k} -> {input_port_token(subs[si], ii, max_depth - 1)};")
    for k, (so, oo) in enumerate(spec.output_sources):
        lines.append(f"{output_port_token(subs[so], oo, max_depth - 1)} -> {_node(system)}_y{k};")
    lines.append("}")
    return lines


def graphviz_string(system: System, max_depth: int) -> str:
    """A complete ``digraph`` for ``system``."""
    lines = [f"digraph _{system.get_graphviz_id()} {{", "rankdir=LR;"]
    lines.extend(graphviz_fragment(system, max_depth))
    lines.append("}")
    return "\n".join(lines) + "\n"
