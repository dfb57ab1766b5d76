"""A module over about 300 lines says why at its top, and the size it states is its size.

The note reads "Why one module of about N lines: ..." (or "over N lines") in the module's
docstring; "about N" must be within a sixth of the module's length, "over N" below it.
"""

import ast
import re
from pathlib import Path

from tests.project.test_rooms import ROOT, packages

LIMIT = 330
NOTE = re.compile(r"Why one module of (about|over) (\d+) lines:")


def modules() -> list[Path]:
    found = [path for package in packages() for path in (ROOT / package).rglob("*.py")]
    found += [path for path in (ROOT / "tests").rglob("*.py") if "vendor" not in path.parts]
    return sorted(path for path in found if "migrations" not in path.parts)


def size_note_problem(path: Path) -> str | None:
    text = path.read_text()
    lines = len(text.splitlines())
    note = NOTE.search(ast.get_docstring(ast.parse(text)) or "")
    if note is None:
        return f"{lines} lines and no size note" if lines > LIMIT else None
    kind, stated = note.group(1), int(note.group(2))
    if kind == "over" and lines <= stated:
        return f"says over {stated} lines, has {lines}"
    if kind == "about" and abs(lines - stated) > lines / 6:
        return f"says about {stated} lines, has {lines}"
    return None


def test_it_finds_every_long_module_saying_why_and_how_long_truly():
    problems = {str(path.relative_to(ROOT)): size_note_problem(path) for path in modules()}
    assert {path: problem for path, problem in problems.items() if problem} == {}


def test_it_sees_a_size_note_that_drifted(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Why one module of about 100 lines: one idea."""\n' + "x = 1\n" * 200)
    assert size_note_problem(module) == "says about 100 lines, has 201"
    module.write_text('"""Why one module of about 190 lines: one idea."""\n' + "x = 1\n" * 200)
    assert size_note_problem(module) is None
    module.write_text("x = 1\n" * 400)
    assert size_note_problem(module) == "400 lines and no size note"
