"""No import circle inside a room: within each package, the modules' imports (those inside functions
too, where a circle hides) form no cycle, so each module can be read after the ones it uses."""

import ast
from pathlib import Path

from tests.project.test_rooms import ROOT, packages


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def edges(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of `package` and the modules of the same package it imports (not the package's
    own __init__, which every submodule's import passes through)."""
    modules = {module_name(p, root): p for p in (root / package).rglob("*.py") if "migrations" not in p.parts}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != package and t != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` (its modules in order), or []."""
    done, path = set(), []

    def visit(node: str) -> list[str]:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return []
        path.append(node)
        for target in sorted(graph[node]):
            if found := visit(target):
                return found
        path.pop()
        done.add(node)
        return []

    for node in sorted(graph):
        if found := visit(node):
            return found
    return []


def test_no_room_has_an_import_circle():
    circles = {package: found for package in sorted(packages()) if (found := cycle(edges(package)))}
    assert circles == {}


def test_it_sees_a_circle_hidden_in_a_function(tmp_path):
    (tmp_path / "room").mkdir()
    (tmp_path / "room" / "__init__.py").write_text("")
    (tmp_path / "room" / "a.py").write_text("from room import b\n")
    (tmp_path / "room" / "b.py").write_text("def f():\n    from room.a import x\n")
    assert cycle(edges("room", tmp_path)) == ["room.a", "room.b", "room.a"]
