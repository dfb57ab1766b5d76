"""Bytes to text, and HTML to its text: pure functions, no Django, so the child process that
runs them (documents.child) imports nothing it does not need."""

import codecs

import charset_normalizer
from lxml import etree


class DocumentError(Exception):
    """One document cannot be read; the message says why and is shown to whoever sent it."""


def decode_text(data: bytes) -> str:
    """Text of `data` as valid UTF-8: detected encoding, undecodable bytes replaced."""
    if not data.strip():
        raise DocumentError("The file is empty.")
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):  # fmt: skip
        if data.startswith(bom):
            return clean(data.decode(encoding, errors="replace"))
    if b"\x00" in data[:8192]:
        raise DocumentError("The file is binary, not text.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode(_guess_encoding(data), errors="replace")
    return clean(text)


def _guess_encoding(data: bytes) -> str:
    matches = list(charset_normalizer.from_bytes(data))
    if not matches:
        raise DocumentError("The file is binary, not text.")
    # Short Western text is ambiguous between the Latin code pages; the most common one wins a near tie.
    western = next((m for m in matches if m.encoding == "cp1252"), None)
    if western is not None and western.chaos <= matches[0].chaos + 0.1:
        return western.encoding
    return matches[0].encoding


def clean(text: str) -> str:
    """`text` without NUL or lone surrogates; DocumentError when it is empty or mostly control codes."""
    sample = text[:8192]
    controls = sum(1 for c in sample if c < " " and c not in "\n\r\t\f")
    if sample and controls / len(sample) > 0.1:
        raise DocumentError("The file is binary, not text.")
    # PostgreSQL text cannot hold NUL; lone surrogates are not valid UTF-8.
    text = text.replace("\x00", "").encode("utf-8", errors="replace").decode("utf-8")
    if not text.strip():
        raise DocumentError("The file is empty.")
    return text


class _HTMLText:
    """lxml parser target collecting the text outside script and style, a line break per block.
    libxml2's HTML parser is linear in its input; the standard library's html.parser is quadratic
    on unclosed tags (`<a<a<a…`: 64 KB took seconds, 10 MiB would take a day)."""

    BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article"}
    SKIP = {"script", "style", "head", "template", "noscript"}

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._skipping = 0

    def start(self, tag, attrs):
        if tag in self.SKIP:
            self._skipping += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def end(self, tag):
        if tag in self.SKIP and self._skipping:
            self._skipping -= 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def data(self, data):
        if not self._skipping:
            self.parts.append(data)

    def close(self) -> str:
        return "".join(self.parts)


def html_text(markup: str) -> str:
    """The readable text of an HTML document, one line per block; DocumentError if it has none."""
    parser = etree.HTMLParser(target=_HTMLText(), recover=True, no_network=True, huge_tree=False)
    try:
        parser.feed(markup)
        raw = parser.close()
    except etree.LxmlError as exc:
        raise DocumentError(f"The HTML could not be read: {exc}") from None
    lines = (" ".join(line.split()) for line in raw.splitlines())
    text = "\n".join(line for line in lines if line)
    if not text:
        raise DocumentError("The HTML has no text.")
    return text
