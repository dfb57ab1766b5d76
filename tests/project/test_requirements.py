"""What ships: the production image installs requirements.txt and the engine's (`make install`), and
none of the suite's, the lint's or the benchmarks' packages (requirements/dev.txt), which no module
of the product imports."""

import ast
import re
from pathlib import Path

import redis.utils
from redis._parsers import _AsyncHiredisParser

import redisconn

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = {
    "pytest",
    "pytest-django",
    "pytest-asyncio",
    "pytest-timeout",
    "playwright",
    "ruff",
    "matplotlib",
    "openai",
    "pyyaml",
    "websockets",
    "django-oauth-toolkit",
    "pysaml2",
}
# The import names of the development packages.
DEV_IMPORTS = {
    "pytest",
    "pytest_django",
    "pytest_asyncio",
    "playwright",
    "ruff",
    "matplotlib",
    "openai",
    "yaml",
    "websockets",
    "oauth2_provider",
    "saml2",
}
NOT_SHIPPED = {"tests", "bench", ".venv", ".venv-tools", "var"}


def names(path: Path) -> set[str]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return {re.split(r"[<>=!;\[ ]", line)[0].lower() for line in lines if line}


def test_the_images_requirements_hold_no_development_package():
    shipped = names(ROOT / "requirements.txt")
    for engine in ROOT.glob("requirements/engine-*.txt"):
        shipped |= names(engine)
    assert shipped & DEV_ONLY == set()
    assert DEV_ONLY <= names(ROOT / "requirements" / "dev.txt")
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "make install " in dockerfile and "install-dev" not in dockerfile and "dev.txt" not in dockerfile


def test_no_module_of_the_product_imports_a_development_package():
    found = []
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] in NOT_SHIPPED or "migrations" in parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}: {m}" for m in modules if m.split(".")[0] in DEV_IMPORTS]
    assert found == []


def test_make_test_installs_both_and_make_run_the_products_alone():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: install-dev( |$)", makefile, re.MULTILINE)
    assert re.search(r"^prepare: install ", makefile, re.MULTILINE)
    assert "-r requirements/dev.txt" in makefile


def test_redis_replies_are_parsed_by_hiredis():
    """requirements.txt ships hiredis, and redis-py picks it for every connection it makes."""
    assert "hiredis" in names(ROOT / "requirements.txt")
    assert redis.utils.HIREDIS_AVAILABLE
    assert isinstance(redisconn.lone_connection()._parser, _AsyncHiredisParser)
