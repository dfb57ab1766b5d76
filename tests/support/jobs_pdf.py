"""Small PDFs for tests: one page per text (harness.pdf)."""

from harness.pdf import pdf_with_text

__all__ = ["pdf_with_text"]
