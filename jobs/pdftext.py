"""Extract a PDF's text in a child process: `python -m jobs.pdftext --cpu-seconds N < file.pdf`.

jobs.pdfread runs this with an empty environment under a wall-clock timeout, and this process
limits its own memory and CPU time before it touches the PDF, so a malformed or hostile PDF (a
parser loop, a decompression bomb) ends this process, not the worker. Exit status 0: text on
stdout; otherwise the reason on stderr.
"""

import argparse
import io
import resource
import sys

MEMORY_LIMIT = 1024 * 1024 * 1024


def apply_limits(argv: list[str]) -> None:
    """Memory, and the CPU seconds the parent asks for: past them SIGXCPU, a second later SIGKILL."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu-seconds", type=int, required=True)
    cpu = parser.parse_args(argv).cpu_seconds
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def main() -> int:
    apply_limits(sys.argv[1:])
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(sys.stdin.buffer.read()))
        if reader.is_encrypted:
            print("The PDF is encrypted.", file=sys.stderr)
            return 2
        for page in reader.pages:
            sys.stdout.write((page.extract_text() or "") + "\n\n")
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        print(f"The PDF could not be read: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("The PDF needs more memory than allowed to read.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
