"""Models: embeddings (local, named, cached), chat models and the runner of LLM calls."""
