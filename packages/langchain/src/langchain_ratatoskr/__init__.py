"""LangChain integration of ratatoskr's memory plane: :class:`RatatoskrVectorStore`."""

from langchain_ratatoskr.vectorstore import EmbeddingDimensionMismatch, RatatoskrVectorStore

__all__ = ["EmbeddingDimensionMismatch", "RatatoskrVectorStore"]
