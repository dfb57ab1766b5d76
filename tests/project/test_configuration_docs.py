"""docs/configuration.md lists every environment variable the product reads, and no other."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "configuration.md").read_text()


def documented() -> set[str]:
    rows = [line for line in DOC.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def read_by_the_product() -> set[str]:
    # The settings, the readers they share with deploy/, and the web process's entry point (read
    # before daphne starts).
    python = "".join(
        (ROOT / "chatsite" / name).read_text()
        for name in ("settings.py", "env.py", "daphne.py", "signon.py", "signon_saml.py")
    )
    names = set(re.findall(r'env_(?:str|int|float|bool|list|choice|secret)\(\s*"([A-Z0-9_]+)"', python))
    # Single sign-on's readers of a provider list and a group map (chatsite/signon.py).
    names |= set(re.findall(r'(?:provider_ids|group_map)\(\s*"([A-Z0-9_]+)"', python))
    # A secret also comes from the file its NAME_FILE names.
    names |= {f"{name}_FILE" for name in re.findall(r'env_secret\(\s*"([A-Z0-9_]+)"', python)}
    # Variables the processes read themselves: the Procfile's and the Makefile's.
    names |= set(re.findall(r"\$\{([A-Z0-9_]+)", (ROOT / "Procfile").read_text()))
    names |= set(re.findall(r"^([A-Z][A-Z0-9_]+) \?=", (ROOT / "Makefile").read_text(), re.MULTILINE))
    return names


def test_it_documents_every_variable_the_product_reads():
    assert read_by_the_product() - documented() == set()


def test_it_documents_no_variable_the_product_does_not_read():
    assert documented() - read_by_the_product() == set()


def test_it_documents_each_saml_providers_own_variables():
    code = (ROOT / "chatsite" / "signon_saml.py").read_text()
    read = set(re.findall(r'var\("([A-Z0-9_]+)"\)', code))
    read |= {f"{name}_FILE" for name in re.findall(r'env_secret\(var\("([A-Z0-9_]+)"\)', code)}
    assert read == set(re.findall(r"`SSO_SAML_<ID>_([A-Z0-9_]+)`", DOC))
