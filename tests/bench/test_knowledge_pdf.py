"""The benchmark's committed 1.3 MB PDF is what its generator writes, so anyone can make it again."""

from bench.knowledge_pdf import PDF, PLANTED, TARGET_BYTES, handbook_pdf


def test_the_committed_pdf_is_the_generators_and_holds_the_planted_sentence():
    data = PDF.read_bytes()
    assert data == handbook_pdf()
    assert TARGET_BYTES <= len(data) < TARGET_BYTES * 1.1
    assert f"({PLANTED}) Tj".encode() in data
