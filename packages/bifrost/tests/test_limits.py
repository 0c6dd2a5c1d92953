"""Bad limits: every store of a plane refuses them with the same typed error,
InvalidLimits (an InvalidArguments and a ValueError), before anything is made."""

from __future__ import annotations

from typing import Any

import pytest

from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.errors import InvalidArguments
from bifrost.limits import InvalidLimits, check_affect_limits, check_memory_limits

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
