"""Uploads become documents; bad input becomes a clear per-document or per-upload error."""

import io
import json
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from documents.uploads import Limits, UploadRejected, documents_from_files, documents_from_records

LIMITS = Limits(upload_bytes=100_000, file_bytes=10_000, documents=20, uncompressed_bytes=50_000)


def upload(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data)


def read_all(uploads: list, limits: Limits = LIMITS) -> list:
    """Every document of an upload at once (the product reads them one at a time as it stores them)."""
    return list(documents_from_files(uploads, limits))


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


HTML = b"<html><head><style>p{}</style><script>x()</script></head><body><p>Hello &amp; bye"


def test_it_reads_text_and_markdown_and_keeps_html_for_the_child_process():
    docs = read_all(
        [upload("a.txt", b"Plain text."), upload("b.md", b"# Title\n\nBody."), upload("c.html", HTML)]
    )
    assert [(d.external_id, d.text, d.error) for d in docs] == [
        ("a.txt", "Plain text.", ""),
        ("b.md", "# Title\n\nBody.", ""),
        ("c.html", "", ""),
    ]
    assert (docs[2].source, docs[2].format) == (HTML, "html")


def test_it_decodes_non_utf8_text_and_stores_valid_utf8():
    text = "Café crème, déjà vu, naïve façade, garçon, élève, où, très bien. " * 3
    docs = read_all([upload("latin.txt", text.encode("latin-1"))], LIMITS)
    assert docs[0].error == ""
    assert "Café crème" in docs[0].text
    docs[0].text.encode("utf-8")
    broken = read_all([upload("broken.txt", b"ok \xff\xfe\xfa then more text")], LIMITS)[0]
    assert broken.error == "" and broken.text.encode("utf-8")


def test_it_marks_empty_and_binary_files_as_failed_documents():
    docs = read_all(
        [upload("empty.txt", b""), upload("blank.md", b"  \n\t"), upload("bin.txt", bytes(range(256)) * 4)],
        LIMITS,
    )
    assert [d.error for d in docs] == [
        "The file is empty.",
        "The file is empty.",
        "The file is binary, not text.",
    ]


def test_it_keeps_pdf_bytes_for_the_worker_and_refuses_fake_pdfs():
    pdf, fake = read_all([upload("a.pdf", b"%PDF-1.4 ..."), upload("b.pdf", b"hello")], LIMITS)
    assert (pdf.source, pdf.format, pdf.error) == (b"%PDF-1.4 ...", "pdf", "")
    assert fake.error == "The file is not a PDF."


def test_it_reads_a_zip_of_documents_and_reports_bad_members():
    data = zipped(
        {"one.txt": b"first", "dir/two.html": b"<p>second</p>", "three.exe": b"MZ", "four.txt": b""}
    )
    docs = read_all([upload("batch.zip", data)], LIMITS)
    assert [(d.external_id, d.text, d.source) for d in docs if not d.error] == [
        ("one.txt", "first", None),
        ("dir/two.html", "", b"<p>second</p>"),
    ]
    errors = {d.external_id: d.error for d in docs if d.error}
    assert "Unsupported file type" in errors["three.exe"]
    assert errors["four.txt"] == "The file is empty."


def test_it_refuses_a_zip_bomb_from_its_directory_before_extracting():
    bomb = zipped({f"f{i}.txt": b"a" * 20_000 for i in range(3)})
    assert len(bomb) < 1_000
    with pytest.raises(UploadRejected, match="expands to"):
        read_all([upload("bomb.zip", bomb)], LIMITS)
    many = zipped({f"f{i}.txt": b"x" for i in range(21)})
    with pytest.raises(UploadRejected, match="21 files"):
        read_all([upload("many.zip", many)], LIMITS)


def test_it_refuses_a_member_larger_than_the_file_limit():
    docs = read_all([upload("big.zip", zipped({"big.txt": b"a" * 10_001, "ok.txt": b"fine"}))], LIMITS)
    assert "file limit" in docs[0].error and docs[1].text == "fine"


def test_it_refuses_files_and_uploads_over_the_size_limits():
    with pytest.raises(UploadRejected, match="file limit"):
        read_all([upload("big.txt", b"a" * 10_001)], LIMITS)
    with pytest.raises(UploadRejected, match="The upload is"):
        read_all([upload(f"{i}.txt", b"a" * 9_000) for i in range(12)], LIMITS)


def test_it_reads_jsonl_and_csv_with_id_and_text():
    jsonl = b'{"id": "a", "text": "Alpha"}\n\n{"id": 2, "text": "Beta"}\n{"id": "c", "text": ""}\n'
    csv_data = b'id,text\nx,Gamma\ny,"Delta, with comma"\n'
    docs = read_all([upload("in.jsonl", jsonl), upload("in.csv", csv_data)], LIMITS)
    assert [(d.external_id, d.text, d.error) for d in docs] == [
        ("a", "Alpha", ""),
        ("2", "Beta", ""),
        ("c", "", "The file is empty."),
        ("x", "Gamma", ""),
        ("y", "Delta, with comma", ""),
    ]


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("bad.jsonl", b'{"id": "a", "text": "x"}\nnot json\n', "line 2: not JSON"),
        ("deep.jsonl", b"[" * 5_000 + b"\n", "line 1: not JSON.*nested too deeply"),
        ("bad.jsonl", b'{"text": "no id"}\n', "the id is missing"),
        ("bad.csv", b"name,body\na,b\n", "needs an id column"),
        ("dup.jsonl", b'{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', "more than once"),
        ("bad.zip", b"PK not really", "not a readable zip"),
        ("x.exe", b"MZ", "unsupported file type"),
    ],
)
def test_it_rejects_malformed_uploads_with_a_clear_message(name, data, message):
    with pytest.raises(UploadRejected, match=message):
        read_all([upload(name, data)], LIMITS)


def test_it_reads_json_records_for_the_api():
    docs = documents_from_records([{"id": "a", "text": "x"}, {"custom_id": "b", "content": "y"}], LIMITS)
    assert [(d.external_id, d.text) for d in docs] == [("a", "x"), ("b", "y")]
    with pytest.raises(UploadRejected):
        documents_from_records(json.loads('{"id": 1}'), LIMITS)
