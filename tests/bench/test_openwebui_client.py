"""bench/openwebui_client.py runs in Open WebUI's virtualenv (`make openwebui`), which holds none of
the product: it imports only the standard library and what that virtualenv installs."""

import ast
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "bench" / "openwebui_client.py"
# Installed by `make openwebui` beside open-webui (httpx comes with it).
OPENWEBUI_VENV = {"httpx", "psutil", "socketio"}


def test_it_imports_only_the_standard_library_and_open_webuis_virtualenv():
    names = set()
    for node in ast.walk(ast.parse(CLIENT.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, "a relative import needs the bench package"
            names.add(node.module.split(".")[0])
    assert names - sys.stdlib_module_names == OPENWEBUI_VENV


def test_the_makefile_installs_what_it_imports():
    makefile = (CLIENT.parents[1] / "Makefile").read_text()
    install = next(line for line in makefile.splitlines() if "open-webui==" in line)
    assert "python-socketio" in install and "psutil" in install
