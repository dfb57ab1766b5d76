"""Extract a document's text in a child process: `python -m documents.child --format F --cpu-seconds N`.

documents.reader runs this with an empty environment under a wall-clock timeout, and this process
limits its own memory and CPU time before it touches the document, so a malformed or hostile file
(a parser loop, a decompression bomb, markup that makes a parser quadratic) ends this process, not
the web process or the worker. Exit status 0: text on stdout; otherwise the reason on stderr.
"""

import argparse
import io
import resource
import sys

MEMORY_LIMIT = 1024 * 1024 * 1024
FORMATS = ("text", "html", "pdf")


def apply_limits(argv: list[str]) -> argparse.Namespace:
    """Memory, and the CPU seconds the parent asks for: past them SIGXCPU, a second later SIGKILL."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu-seconds", type=int, required=True)
    parser.add_argument("--format", choices=FORMATS, default="pdf")
    # A form feed between a PDF's pages, so a caller can tell which page a passage is on.
    parser.add_argument("--page-breaks", action="store_true")
    arguments = parser.parse_args(argv)
    cpu = arguments.cpu_seconds
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    return arguments


def _pdf_text(data: bytes, *, page_breaks: bool = False) -> str:
    from pypdf import PdfReader

    from documents.text import DocumentError, clean

    if not data.lstrip().startswith(b"%PDF-"):
        raise DocumentError("The file is not a PDF.")
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise DocumentError("The PDF is encrypted.")
    try:
        end = "\n\n\f" if page_breaks else "\n\n"
        return clean("".join((page.extract_text() or "") + end for page in reader.pages))
    except DocumentError:
        raise DocumentError("The PDF has no extractable text (scanned pages?).") from None


def main() -> int:
    arguments = apply_limits(sys.argv[1:])
    from pypdf.errors import PyPdfError

    from documents.text import DocumentError, decode_text, html_text

    data = sys.stdin.buffer.read()
    try:
        if arguments.format == "pdf":
            text = _pdf_text(data, page_breaks=arguments.page_breaks)
        elif arguments.format == "html":
            text = html_text(decode_text(data))
        else:
            text = decode_text(data)
    except DocumentError as exc:
        print(exc, file=sys.stderr)
        return 2
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        print(f"The PDF could not be read: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("The document needs more memory than allowed to read.", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
