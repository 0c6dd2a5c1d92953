"""Property tests of the scope functions against naive oracles."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bifrost.errors import Forbidden, InvalidArguments, InvalidFilter
from bifrost.scope import (
    SCOPE_LATTICE,
    apply_grant,
    inside_grant,
    matches_scope,
    validate_record_scope,
    validate_scope,
)

AXES = [*SCOPE_LATTICE, "planet", "Tenant"]
GOOD_AXES = list(SCOPE_LATTICE)
good_scope = st.dictionaries(st.sampled_from(GOOD_AXES), st.sampled_from(["a", "b", "c"]))
any_value = st.one_of(
    st.sampled_from(["a", "b", ""]),
    st.integers(0, 2),
    st.none(),
    st.booleans(),
    st.lists(st.just("a"), max_size=1),
)
wild_scope = st.dictionaries(st.sampled_from(AXES), any_value, max_size=3)
wild_field = st.one_of(
    st.none(), wild_scope, st.just("tenant"), st.integers(), st.lists(wild_scope, max_size=3)
)
wild_any = st.one_of(
    st.none(),
    st.lists(st.one_of(wild_scope, st.just("x"), st.none()), max_size=3),
    wild_scope,
    st.just("tenant"),
)


def oracle_validate(scope_all: Any, scope_any: Any) -> str:
    def flat(d: Any) -> bool:
        return isinstance(d, dict) and all(
            isinstance(k, str) and type(v) is str and v != "" for k, v in d.items()
        )

    if scope_all is not None and not flat(scope_all):
        return "args"
    if scope_any is not None and not (
        isinstance(scope_any, list) and all(flat(m) for m in scope_any)
    ):
        return "args"
    axes = set(scope_all or {})
    for m in scope_any or []:
        axes |= set(m)
    return "filter" if axes - set(SCOPE_LATTICE) else "ok"


def oracle_matches(
    record: dict[str, str], all_: dict[str, str], any_: list[dict[str, str]]
) -> bool:
    items = set(record.items())
    return set(all_.items()) <= items and (
        len(any_) == 0 or any(set(m.items()) <= items for m in any_)
    )


@settings(max_examples=200, deadline=None)
@given(scope_all=wild_field, scope_any=wild_any)
def test_validate_scope_matches_oracle(scope_all: Any, scope_any: Any) -> None:
    expected = oracle_validate(scope_all, scope_any)
    if expected == "args":
        with pytest.raises(InvalidArguments):
            validate_scope(scope_all, scope_any)
    elif expected == "filter":
        with pytest.raises(InvalidFilter):
            validate_scope(scope_all, scope_any)
    else:
        all_, any_ = validate_scope(scope_all, scope_any)
        assert all_ == (scope_all or {})
        assert any_ == (scope_any or [])


@settings(max_examples=200, deadline=None)
@given(record=good_scope, all_=good_scope, any_=st.lists(good_scope, max_size=3))
def test_matches_scope_matches_oracle(
    record: dict[str, str], all_: dict[str, str], any_: list[dict[str, str]]
) -> None:
    assert matches_scope(record, all_, any_) == oracle_matches(record, all_, any_)
    assert matches_scope(record, None, None) is True
    assert matches_scope(record, all_, None) == oracle_matches(record, all_, [])


@settings(max_examples=150, deadline=None)
@given(record=good_scope, grant=good_scope, all_=good_scope, any_=st.lists(good_scope, max_size=2))
def test_apply_grant(
    record: dict[str, str], grant: dict[str, str], all_: dict[str, str], any_: list[dict[str, str]]
) -> None:
    assert inside_grant(record, grant) == (set(grant.items()) <= set(record.items()))
    contradicts = any(k in grant and grant[k] != v for k, v in all_.items())
    if contradicts:
        with pytest.raises(Forbidden):
            apply_grant(all_, grant)
        return
    merged = apply_grant(all_, grant)
    assert merged == {**all_, **grant}
    if matches_scope(record, merged, any_):
        assert inside_grant(record, grant)
        assert matches_scope(record, all_, any_)


@settings(max_examples=150, deadline=None)
@given(scope=st.one_of(wild_scope, st.none(), st.just([]), st.just("x")))
def test_validate_record_scope(scope: Any) -> None:
    ok = (
        isinstance(scope, dict)
        and all(type(v) is str and v for v in scope.values())
        and set(scope) <= set(SCOPE_LATTICE)
    )
    if ok:
        assert validate_record_scope(scope) == scope
    else:
        with pytest.raises(InvalidArguments):
            validate_record_scope(scope)
