"""LangChain retrievers: fusion, vector, BM25, hierarchical, vector-store fusion, windows, rerank."""
