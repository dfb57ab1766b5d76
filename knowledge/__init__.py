"""Collections of documents that people ask questions of: their documents read, chunked by tokens and
embedded on the bulk queue; hybrid retrieval (vectors and full text, fused) over the collections a user
may read; the passages a prompt quotes (docs/knowledge.md)."""
