"""Vector stores: ChromaDB and Qdrant behind one protocol."""

from memstack.stores.vectors.base import MetaValue, VectorHit, VectorRecord, VectorStore

__all__ = ["MetaValue", "VectorHit", "VectorRecord", "VectorStore"]
