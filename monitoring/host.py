"""The host's utilisation for the dashboard: the machine's CPU and memory and the product's
processes on it (psutil), and its GPUs through NVML (nvidia-ml-py) where there are any. Without
a GPU, or without the NVIDIA driver, `gpus` is None: absent, never faked."""

import threading

import psutil

# What the product runs (the Procfile's processes and the engine's), found by command line.
PRODUCT_MARKERS = (
    "daphne",
    "celery",
    "runinference",
    "vllm",
    "redis-server",
    "runredis",
    "supervisord",
    "nginx",
)
MAX_PROCESSES = 20
MIB = 1024 * 1024

# psutil measures a process's CPU between two calls on the same Process object: kept per pid.
_processes: dict[int, psutil.Process] = {}
_lock = threading.Lock()


def _is_product(cmdline: list[str]) -> bool:
    line = " ".join(cmdline)
    return any(marker in line for marker in PRODUCT_MARKERS)


def product_processes() -> list[dict]:
    """The product's processes, busiest first: pid, name, CPU % (since the last call) and memory."""
    found = []
    with _lock:
        alive = set()
        for process in psutil.process_iter(["pid", "cmdline"]):
            try:
                cmdline = process.info["cmdline"] or []
                if not _is_product(cmdline):
                    continue
                known = _processes.setdefault(process.pid, process)
                alive.add(process.pid)
                with known.oneshot():
                    found.append(
                        {
                            "pid": process.pid,
                            "name": " ".join(cmdline)[:120],
                            "cpu_percent": round(known.cpu_percent(interval=None), 1),
                            "rss_mib": round(known.memory_info().rss / MIB, 1),
                        }
                    )
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for pid in set(_processes) - alive:
            del _processes[pid]
    found.sort(key=lambda p: (-p["cpu_percent"], -p["rss_mib"]))
    return found[:MAX_PROCESSES]


def gpus() -> list[dict] | None:
    """Each GPU's utilisation, memory and temperature; None where NVML is not there."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver, no device: no GPU figures
        return None
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            found.append(
                {
                    "index": index,
                    "name": pynvml.nvmlDeviceGetName(handle),
                    "utilisation_percent": pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                    "memory_used_mib": round(memory.used / MIB),
                    "memory_total_mib": round(memory.total / MIB),
                    "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                }
            )
        return found
    finally:
        pynvml.nvmlShutdown()


def cpu_times() -> tuple[float, float]:
    """The host's busy and total CPU seconds since boot."""
    times = psutil.cpu_times()
    total = sum(times)
    return total - times.idle - getattr(times, "iowait", 0.0), total


def cpu_percent_between(now: tuple[float, float], before: tuple[float, float] | None) -> float | None:
    """The host's CPU use between two `cpu_times()` readings; None without an earlier one."""
    if before is None or now[1] <= before[1]:
        return None
    return round(100 * (now[0] - before[0]) / (now[1] - before[1]), 1)


class _CpuClock:
    """The host's CPU use since this process's previous reading. Not psutil.cpu_percent, which
    keeps its last reading per thread: the web process answers each request in a new thread, where
    psutil would measure from that same moment and report 0."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None
        self._lock = threading.Lock()

    def percent(self) -> float | None:
        now = cpu_times()
        with self._lock:
            before, self._last = self._last, now
        return cpu_percent_between(now, before)


_cpu = _CpuClock()


def host_figures() -> dict:
    memory = psutil.virtual_memory()
    return {
        "cpu_percent": _cpu.percent(),
        "cpus": psutil.cpu_count(),
        "memory_used_mib": round((memory.total - memory.available) / MIB),
        "memory_total_mib": round(memory.total / MIB),
        "processes": product_processes(),
        "gpus": gpus(),
    }
