"""Reference stores (the authoritative behaviour) and, in
``bifrost.consumer.testing.conformance``, the pytest conformance kit."""

from bifrost.consumer.testing.affect_store import InMemoryAffectStore
from bifrost.consumer.testing.memory_store import InMemoryMemoryStore

__all__ = ["InMemoryAffectStore", "InMemoryMemoryStore"]

try:  # pragma: no cover - pytest is the `testing` extra
    import pytest

    pytest.register_assert_rewrite("bifrost.consumer.testing.conformance")
except ImportError:  # pragma: no cover
    pass
