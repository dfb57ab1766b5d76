import pytest

from tests.topology.k8s import rendered_objects


@pytest.fixture(scope="session")
def objects() -> list[dict]:
    """deploy/k8s's objects, rendered once for every test that reads them."""
    return rendered_objects()
