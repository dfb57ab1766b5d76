"""A process's peak memory around an act, from Linux's /proc: its peak resident size (VmHWM) reset to
its resident size (VmRSS) before the act, read after it. And a file of batch lines of an exact size,
written a block at a time, which the acts measured upload."""

from collections.abc import Callable
from pathlib import Path

LINE = b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'


def resident(pid: int, field: str) -> int:
    """A /proc/PID/status size (VmRSS, VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def peak_growth(pid: int, act: Callable[[], object]) -> int:
    """How far the process's peak resident size rose above its size before `act` ran."""
    before = resident(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    act()
    return resident(pid, "VmHWM") - before


def batch_lines_file(path: Path, size: int) -> Path:
    """`size` bytes of JSON lines at `path` (the last one cut short), never held whole."""
    block = LINE * ((1 << 20) // len(LINE) + 1)
    with open(path, "wb") as out:
        while out.tell() < size:
            out.write(block[: size - out.tell()])
    return path
