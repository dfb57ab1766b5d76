"""Real text for the knowledge benchmarks, and its embeddings, made once and kept under var/bench/.

The passages are the docstrings of the Python packages installed beside the product (Django, NumPy,
PyTorch, transformers, vLLM...): real English prose about many subjects, no download, the same on every
host with the same packages. They are cut into passages of about 40 words and embedded with the bundled
embedding model in this process (the embedding engine's own encoder: what it serves), once per setting;
the files are reused by later runs.
"""

import ast
import hashlib
import json
import os
import re
import site
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.results import ROOT

CACHE = ROOT / "var" / "bench"
WORDS = 30
PIECE = 10_000


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(errors="ignore"))
    except (SyntaxError, ValueError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and len(doc) > 80:
                yield doc


def _clean(text: str) -> str:
    # Prose only: drop doctest lines, parameter tables and reST markup.
    lines = [line for line in text.splitlines() if not line.lstrip().startswith((">>>", "...", "--", ".."))]
    text = re.sub(r"[`*:=_|<>\[\]{}\x00]+", " ", " ".join(lines))
    return re.sub(r"\s+", " ", text).strip()


def passages(count: int) -> list[str]:
    """`count` distinct passages of about WORDS words, in a fixed order (kept under var/bench/)."""
    path = CACHE / f"passages-{count}.json"
    if path.exists():
        return json.loads(path.read_text())
    found = _scan(count)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found))
    return found


def _scan(count: int) -> list[str]:
    seen: set[str] = set()
    found: list[str] = []
    for root in (Path(p) for p in site.getsitepackages()):
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.endswith("-info")):
            for path in sorted(folder.rglob("*.py")):
                for doc in _docstrings(path):
                    words = _clean(doc).split()
                    for start in range(0, len(words) - WORDS // 2, WORDS):
                        passage = " ".join(words[start : start + WORDS])
                        if len(passage) > 120 and passage not in seen:
                            seen.add(passage)
                            found.append(passage)
                            if len(found) == count:
                                return found
    raise RuntimeError(f"only {len(found)} passages in the installed packages; {count} asked")


class Embedder:
    """The embedding engine's encoder (enginehost.embedserver.Encoder) in this process, as the
    settings make it (EMBEDDING_MAX_TOKENS, EMBEDDING_QUANTIZE)."""

    def __init__(self, model_dir: str, threads: int | None = None) -> None:
        from django.conf import settings

        from enginehost.embedserver import Encoder

        self.encoder = Encoder(
            model_dir,
            settings.EMBEDDING_MAX_TOKENS,
            threads=threads or len(os.sched_getaffinity(0)),
            quantize=settings.EMBEDDING_QUANTIZE,
        )

    def __call__(self, texts: list[str], batch: int = 64) -> np.ndarray:
        out = [self.encoder(texts[i : i + batch])[0] for i in range(0, len(texts), batch)]
        return np.concatenate(out).astype("<f4")


def embedded(texts: list[str], model_dir: str, name: str, batch: int = 64) -> np.ndarray:
    """The texts' vectors, `batch` a forward pass (with EMBEDDING_QUANTIZE a text's vector depends a
    little on the texts beside it), kept under var/bench/ in pieces of PIECE texts and read back where the
    same texts were embedded before the same way: a corpus that begins with a smaller one embeds only the
    rest, and a run stopped midway keeps the pieces it finished."""
    from django.conf import settings

    how = ("-int8" if settings.EMBEDDING_QUANTIZE else "") + ("" if batch == 64 else f"-b{batch}")
    pieces, embedder = [], None
    for start in range(0, len(texts), PIECE):
        piece = texts[start : start + PIECE]
        digest = hashlib.sha256("\n".join(piece).encode()).hexdigest()[:16]
        path = CACHE / f"{name}{how}-{len(piece)}-{digest}.npy"
        if not path.exists():
            embedder = embedder or Embedder(model_dir)
            CACHE.mkdir(parents=True, exist_ok=True)
            np.save(path, embedder(piece, batch))
        pieces.append(np.load(path))
    return np.concatenate(pieces)
