"""LangChain integration of ratatoskr's memory plane: :class:`RatatoskrVectorStore`."""

from langchain_ratatoskr.limits import EmbeddingDimensionMismatch
from langchain_ratatoskr.vectorstore import RatatoskrVectorStore

__all__ = ["EmbeddingDimensionMismatch", "RatatoskrVectorStore"]
