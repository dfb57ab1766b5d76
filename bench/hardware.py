"""The host's ceilings, measured, so throughput can be read as a share of what the hardware allows.

Two numbers, each the best of a few timed runs on every core: bf16 matrix multiplication
(GFLOP/s, torch.matmul on 1024×1024 matrices) and memory copy bandwidth (GB/s, a 256 MiB
tensor copied). A decoding step reads every weight once for the whole batch and spends about
2 FLOPs per weight per token, so for a model of P bf16 weights at batch B:

    compute ceiling = GFLOP/s / (2 P)            tokens/s, whatever the batch
    bandwidth ceiling = B × GB/s / (2 bytes × P)  tokens/s, growing with the batch

Attention, sampling, the scheduler and Python are not counted, so real throughput sits
below both; how far below, and which ceiling is nearer, says what holds the rest back.
"""

import time
from pathlib import Path

import torch


def _best_seconds(run, repeats: int = 5) -> float:
    run()  # warm
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def matmul_gflops(size: int = 1024, loops: int = 4) -> float:
    a = torch.randn(size, size, dtype=torch.bfloat16)
    b = torch.randn(size, size, dtype=torch.bfloat16)

    def run() -> None:
        for _ in range(loops):
            torch.matmul(a, b)

    return 2 * size**3 * loops / _best_seconds(run) / 1e9


def copy_gb_per_s(mebibytes: int = 256) -> float:
    source = torch.empty(mebibytes * 2**20, dtype=torch.uint8).fill_(1)
    target = torch.empty_like(source)
    # A copy reads and writes every byte.
    return 2 * source.numel() / _best_seconds(lambda: target.copy_(source)) / 1e9


def model_weights(model_dir: str) -> int:
    """Weights of a bf16 checkpoint: its safetensors bytes over 2 (the header is a rounding error)."""
    return sum(path.stat().st_size for path in Path(model_dir).glob("*.safetensors")) // 2


def ceilings(model_dir: str) -> dict:
    weights = model_weights(model_dir)
    return {
        "threads": torch.get_num_threads(),
        "bf16_matmul_gflops": round(matmul_gflops(), 1),
        "copy_gb_per_s": round(copy_gb_per_s(), 2),
        "model_weights": weights,
    }


def shares(hardware: dict, tokens_per_s: float, batch: int) -> dict:
    """Tokens/s as a share of the compute and of the memory-bandwidth ceiling at `batch`."""
    weights = hardware["model_weights"]
    compute = hardware["bf16_matmul_gflops"] * 1e9 / (2 * weights)
    bandwidth = batch * hardware["copy_gb_per_s"] * 1e9 / (2 * weights)
    return {
        "compute_ceiling_tokens_per_s": round(compute, 1),
        "bandwidth_ceiling_tokens_per_s": round(bandwidth, 1),
        "share_of_compute": round(tokens_per_s / compute, 3),
        "share_of_bandwidth": round(tokens_per_s / bandwidth, 3),
    }
