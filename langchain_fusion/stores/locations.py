"""Milvus locations (``milvus://HOST:PORT/COLLECTION``...), importable from here as before.

The code is in :mod:`langchain_fusion.stores.milvus.engine`.
"""

from langchain_fusion.stores.milvus.engine import (
    MILVUS_TOKEN_ENV,
    SCHEMES,
    MilvusEngine,
    MilvusLocation,
    is_store_location,
    parse_location,
)

__all__ = ["MILVUS_TOKEN_ENV", "SCHEMES", "MilvusEngine", "MilvusLocation", "is_store_location", "parse_location"]
