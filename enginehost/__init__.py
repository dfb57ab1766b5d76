"""The engine's own process: vLLM's server under its supervisor (`runinference`), vLLM's router in
front of several replicas (`runrouter`), the default model (`prepare_model`), and the embedding
engine (`runembeddings`, `prepare_embedding_model`). The rest of the
product reaches the engine through `inference` only, and nothing there imports this package."""
