"""Vector stores: ChromaDB, Qdrant and qdrant-edge behind one protocol."""

from memstack.stores.vectors.base import MetaValue, VectorHit, VectorRecord, VectorStore

__all__ = ["MetaValue", "VectorHit", "VectorRecord", "VectorStore"]
