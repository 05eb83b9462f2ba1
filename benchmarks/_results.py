"""Writes one delimited block of ``benchmarks/RESULTS.md``, leaving the rest of the file alone."""

from __future__ import annotations

import pathlib


RESULTS = pathlib.Path(__file__).parent / "RESULTS.md"


def write_block(name: str, lines: list[str]) -> None:
    """Replace (or append) the block between ``<!-- NAME -->`` and ``<!-- end NAME -->``."""
    start, end = f"<!-- {name} -->", f"<!-- end {name} -->"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    block = start + "\n\n" + "\n".join(lines) + "\n\n" + end
    head, found, rest = text.partition(start)
    if found:
        tail = rest.partition(end)[2]
        RESULTS.write_text(head + block + tail)
    else:
        RESULTS.write_text(text.rstrip() + "\n\n" + block + "\n")
    print(f"written {RESULTS}")
