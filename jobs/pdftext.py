"""Extract a PDF's text in a child process: `python -m jobs.pdftext < file.pdf`.

The worker runs this under a wall-clock timeout with memory and CPU limits, so a
malformed or hostile PDF (a parser loop, a decompression bomb) ends this process,
not the worker. Exit status 0: text on stdout; otherwise the reason on stderr.
"""

import io
import resource
import sys

MEMORY_LIMIT = 1024 * 1024 * 1024


def main() -> int:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
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
