"""The product's rooms and the direction of their imports (README, "Map of the code").

Each package sits on a floor; a module may import its own package and the floors below, never a
floor above nor a neighbour on its own floor. Every import counts, those inside functions too:
a late import still ties two rooms together. A new package has to be given its floor here.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FLOORS: list[tuple[str, ...]] = [
    # What every room shares: HTTP refusals/JSON/SSE, documents, per-loop state, logs, processes, and
    # the bulk queue's task options.
    ("logcontext", "eventloops", "harness", "httpkit", "documents", "bulkqueue"),
    # Redis, as every room reaches it.
    ("redisconn",),
    # Who: users and their audit trail.
    ("accounts", "audit"),
    # Who, from outside: single sign-on through an organisation's identity provider.
    ("sso",),
    # What a user may spend and use: API tokens, token quotas, the engine's boundary.
    ("apitokens", "usage", "inference"),
    # The engine's own process (launcher, router, default model): it uses the boundary's topology.
    ("enginehost",),
    # An answer's run, the same for every surface.
    ("answers",),
    # The conversation store: what the chat, the API and the exports keep (its answers' statuses);
    # beside it the knowledge the chat and the API retrieve from: collections, passages, vectors.
    ("conversations", "knowledge"),
    # The surfaces: the chat, bulk summarization, the OpenAI-compatible API (which stores its
    # exchanges in the conversation store).
    ("chat", "jobs", "openai_api"),
    # The OpenAI Batch API: its files, and batches run as bulk jobs of the API's requests.
    ("batches",),
    # Monitoring reads every room.
    ("monitoring",),
    # Wiring: the project's configuration and its web process.
    ("chatsite",),
    # Tooling: how the processes are deployed (rendered from the configuration), and the benchmarks.
    ("deploy",),
    ("bench",),
]
FLOOR = {package: level for level, packages in enumerate(FLOORS) for package in packages}


def packages(root: Path = ROOT) -> set[str]:
    return {
        path.parent.name
        for path in root.glob("*/__init__.py")
        if path.parent.name not in {"tests"} and not path.parent.name.startswith(".")
    }


def imported(path: Path) -> set[str]:
    """The top-level names a module imports (absolute imports only: relative ones stay home)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def arrows_up(root: Path = ROOT) -> list[str]:
    wrong = []
    for package in sorted(packages(root)):
        for path in sorted((root / package).rglob("*.py")):
            for target in sorted(imported(path) & FLOOR.keys() - {package}):
                if FLOOR[target] >= FLOOR[package]:
                    where = path.relative_to(root)
                    wrong.append(
                        f"{where} imports {target} (floor {FLOOR[target]} from floor {FLOOR[package]})"
                    )
    return wrong


def test_it_gives_every_package_a_floor():
    assert packages() - FLOOR.keys() == set()


def test_it_finds_no_import_up_a_floor_or_across_one():
    assert arrows_up() == []


def test_it_sees_an_import_up(tmp_path):
    """The walk itself: a lower room importing the store is found, and so is a neighbour."""
    (tmp_path / "redisconn").mkdir()
    (tmp_path / "redisconn" / "__init__.py").write_text("def f():\n    from conversations import models\n")
    (tmp_path / "conversations").mkdir()
    (tmp_path / "conversations" / "__init__.py").write_text("import redisconn\n")
    (tmp_path / "openai_api").mkdir()
    (tmp_path / "openai_api" / "__init__.py").write_text("from chat import protocol\n")
    assert arrows_up(tmp_path) == [
        "openai_api/__init__.py imports chat (floor 8 from floor 8)",
        "redisconn/__init__.py imports conversations (floor 7 from floor 1)",
    ]


def test_the_readme_map_names_every_room():
    readme = (ROOT / "README.md").read_text()
    assert {package for package in packages() if f"`{package}/`" not in readme} == set()
