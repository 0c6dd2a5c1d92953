"""Bad limits: every store of a plane refuses them with the same typed error,
InvalidLimits (an InvalidArguments and a ValueError), before anything is made."""

from __future__ import annotations

from typing import Any

import pytest

from bifrost.affect.protocol import affect_health
from bifrost.affect.validation import DEFAULT_MAX_PAGE as AFFECT_MAX_PAGE
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.errors import InvalidArguments
from bifrost.limits import InvalidLimits, check_affect_limits, check_memory_limits
from bifrost.memory.protocol import memory_health
from bifrost.memory.validation import DEFAULT_MAX_BATCH
from bifrost.memory.validation import DEFAULT_MAX_PAGE as MEMORY_MAX_PAGE
from bifrost.quota import NO_QUOTA
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY

MEMORY_OK: dict[str, Any] = {
    "embedding_dim": 4,
    "max_batch": 1,
    "max_top_k": 1,
    "max_scope_any": 1,
    "max_page": 1,
}
AFFECT_OK: dict[str, Any] = {"max_batch": 1, "max_page": 1, "max_scope_any": 1}


def test_invalid_limits_is_both_kinds_of_error() -> None:
    assert issubclass(InvalidLimits, InvalidArguments)
    assert issubclass(InvalidLimits, ValueError)


@pytest.mark.parametrize("name", sorted(MEMORY_OK))
@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_memory_limits(name: str, bad: object) -> None:
    check_memory_limits(**MEMORY_OK)
    limits: dict[str, Any] = {**MEMORY_OK, name: bad}
    with pytest.raises(InvalidLimits, match=f"{name} must be a positive integer"):
        check_memory_limits(**limits)


@pytest.mark.parametrize("name", ["max_batch", "max_top_k", "max_scope_any", "max_page"])
def test_the_reference_memory_store_refuses_a_bad_limit(name: str) -> None:
    limits: dict[str, Any] = {k: v for k, v in MEMORY_OK.items() if k != "embedding_dim"}
    with pytest.raises(InvalidLimits, match=name):
        InMemoryMemoryStore(4, **{**limits, name: 0})


@pytest.mark.parametrize("name", sorted(AFFECT_OK))
def test_the_reference_affect_store_refuses_a_bad_limit(name: str) -> None:
    check_affect_limits(**AFFECT_OK)
    with pytest.raises(InvalidLimits, match="must be positive"):
        InMemoryAffectStore(**{**AFFECT_OK, name: 0})


def test_the_reference_stores_take_the_planes_options_with_their_defaults() -> None:
    # One TypedDict a plane (MemoryOptions, AffectOptions) and one take_options: the
    # defaults and the checks every store of the plane gets.
    memory = InMemoryMemoryStore(4, max_top_k=3, filterable_fields=iter(["a", "b", "a"]))
    assert memory.health() == memory_health(
        embedding_dim=4, max_batch=DEFAULT_MAX_BATCH, max_top_k=3, max_page=MEMORY_MAX_PAGE
    )
    assert memory.max_scope_any == DEFAULT_MAX_SCOPE_ANY
    assert memory.filterable_fields == ("a", "b")
    assert memory.retention_s is None and memory.quota is NO_QUOTA
    assert InMemoryMemoryStore(embedding_dim=2, retention_s=5).retention_s == 5
    affect = InMemoryAffectStore(max_page=7)
    assert affect.health() == affect_health(max_batch=DEFAULT_MAX_BATCH, max_page=7)
    assert affect.max_scope_any == DEFAULT_MAX_SCOPE_ANY and affect.quota is NO_QUOTA
    assert InMemoryAffectStore().max_page == AFFECT_MAX_PAGE


def test_the_reference_stores_refuse_what_an_explicit_signature_refuses() -> None:
    misspelt: dict[str, Any] = {"max_pages": 7}
    with pytest.raises(TypeError, match="'max_pages'"):
        InMemoryMemoryStore(4, **misspelt)
    with pytest.raises(TypeError, match="'max_pages'"):
        InMemoryAffectStore(**misspelt)
    positional: Any = InMemoryAffectStore
    with pytest.raises(TypeError):
        positional(5)
    with pytest.raises(TypeError, match="embedding_dim must be an int"):
        InMemoryMemoryStore(True)
    with pytest.raises(ValueError, match="retention_s"):
        InMemoryMemoryStore(4, retention_s=0)
    with pytest.raises(ValueError, match="filterable field"):
        InMemoryMemoryStore(4, filterable_fields=[""])
