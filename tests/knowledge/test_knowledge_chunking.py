"""Passages cut by the embedding model's tokens, with overlap, the same every time, pages kept."""

from django.test import override_settings

from knowledge import chunking


def _words(n: int) -> str:
    return " ".join(f"word{i}" for i in range(n))


def test_it_cuts_by_tokens_with_overlap_and_the_same_cut_every_time():
    text = _words(600)
    with override_settings(KNOWLEDGE_CHUNK_TOKENS=64, KNOWLEDGE_CHUNK_OVERLAP=16):
        first = chunking.pieces(text)
        assert first == chunking.pieces(text)
    assert len(first) > 5
    assert [p.position for p in first] == list(range(len(first)))
    tokenizer = chunking.tokenizer()
    for piece in first:
        assert piece.tokens <= 64
        assert len(tokenizer.encode(piece.text, add_special_tokens=False).ids) <= 64
        assert text[piece.start :].startswith(piece.text)
    # Each passage after the first starts inside the one before: what one cuts, the next holds whole.
    for before, after in zip(first, first[1:], strict=False):
        assert after.start < before.start + len(before.text)
    assert first[-1].text.endswith("word599")


def test_it_names_the_page_a_passage_starts_on():
    pages = [f"Page {n} says " + _words(80) for n in (1, 2, 3)]
    text = "\n\n\f".join(pages)
    with override_settings(KNOWLEDGE_CHUNK_TOKENS=40, KNOWLEDGE_CHUNK_OVERLAP=0):
        found = chunking.pieces(text)
    assert found[0].page == 1
    assert found[-1].page == 3
    starting = {p.page for p in found if p.text.startswith("Page")}
    assert {1, 2, 3} <= {p.page for p in found}
    assert all("\f" not in p.text for p in found)
    assert starting
    assert chunking.pieces("no pages here")[0].page is None


def test_its_chunker_id_changes_with_the_settings_so_a_new_cut_reindexes():
    before = chunking.chunker_id()
    with override_settings(KNOWLEDGE_CHUNK_TOKENS=120):
        assert chunking.chunker_id() != before


def test_a_passages_windows_are_its_sentences_each_cut_at_the_window_size():
    passage = "Zebras graze at noon. Do lions sleep? Yes!\nThe keeper feeds them " + _words(100) + "."
    with override_settings(KNOWLEDGE_WINDOW_TOKENS=32):
        found = chunking.windows(passage)
        assert found[:3] == ["Zebras graze at noon.", "Do lions sleep?", "Yes!"]
        assert found[3].startswith("The keeper feeds them") and len(found) > 5
        tokenizer = chunking.tokenizer()
        assert all(len(tokenizer.encode(w, add_special_tokens=False).ids) <= 32 for w in found)
        assert all(window in passage for window in found)
        cut_at_32 = chunking.chunker_id()
        # One sentence is its passage's own vector; no windows.
        assert chunking.windows("Zebras graze at noon.") == []
    with override_settings(KNOWLEDGE_WINDOW_TOKENS=0):
        assert chunking.windows(passage) == []
        assert chunking.chunker_id() != cut_at_32
