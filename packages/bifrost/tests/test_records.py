"""bifrost.records: the plane-generic validators, and the canonical JSON of a record
that validation makes once (the copy a store keeps, the digest, the affect text)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bifrost.affect.validation import validate_put
from bifrost.errors import InvalidArguments
from bifrost.idempotency import request_digest
from bifrost.jsoncodec import canonical_json
from bifrost.memory.validation import validate_upsert
from bifrost.records import (
    MAX_ID_BYTES,
    CanonicalBatch,
    canonical_record,
    claim_id,
    json_copy,
    load_canonical,
    record_label,
    required_scope,
    validate_expected_revisions,
    validate_id,
    validate_ids,
    validate_records_common,
)
from bifrost.writes import digest_of_canonical

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)
json_records = st.dictionaries(st.text(max_size=6), json_values, max_size=6)


def test_record_label() -> None:
    assert record_label(None) == "record"
    assert record_label(3) == "record 3"


def test_validate_id() -> None:
    assert validate_id("a") == "a"
    assert validate_id("é" * (MAX_ID_BYTES // 2)) == "é" * (MAX_ID_BYTES // 2)
    for bad, message in [
        ("", "non-empty string"),
        (3, "non-empty string"),
        ("\ud800", "not valid unicode"),
        ("é" * (MAX_ID_BYTES // 2 + 1), "longer than 512 bytes"),
    ]:
        with pytest.raises(InvalidArguments, match=message):
            validate_id(bad, "chunk_id")


def test_validate_ids_and_records_common() -> None:
    assert validate_ids(["b", "a", "b"], max_batch=3) == ["b", "a", "b"]
    with pytest.raises(InvalidArguments, match="exceeds max_batch 1"):
        validate_ids(["a", "b"], max_batch=1)
    with pytest.raises(InvalidArguments, match=r"ids\[1\] must be a non-empty string"):
        validate_ids(["a", ""], max_batch=5)
    assert validate_records_common([{}], max_batch=1) == [{}]
    with pytest.raises(InvalidArguments, match="record 1: must be an object"):
        validate_records_common([{}, []], max_batch=5)
    with pytest.raises(InvalidArguments, match="records must be a list"):
        validate_records_common({}, max_batch=5)


def test_claim_id_names_both_records() -> None:
    seen: dict[str, int] = {}
    claim_id(seen, "a", 0)
    claim_id(seen, "b", 1)
    with pytest.raises(InvalidArguments, match="records 0 and 2 share a key"):
        claim_id(seen, "a", 2, "a key")


def test_validate_expected_revisions_keeps_the_order_given() -> None:
    assert validate_expected_revisions(None, {"a"}) == {}
    assert list(validate_expected_revisions({"b": 2, "a": 0}, {"a", "b"})) == ["b", "a"]


@given(json_records)
@pytest.mark.slow
def test_canonical_record_is_the_codecs_canonical_json(record: dict[str, Any]) -> None:
    data, plain = canonical_record(record)
    assert data == canonical_json(record)
    assert load_canonical(data, plain) == json_copy(record) == record


@given(st.lists(json_records, max_size=5), st.dictionaries(st.text(max_size=3), st.integers(0, 9)))
@pytest.mark.slow
def test_the_digest_of_canonical_parts_is_the_request_digest(
    records: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    parts = [canonical_record(r) for r in records]
    if all(plain for _, plain in parts):
        assert digest_of_canonical([d for d, _ in parts], expected) == request_digest(
            records, expected
        )


def test_what_orjson_refuses_or_nulls_takes_the_codecs_path() -> None:
    big = {"n": 2**70}
    data, plain = canonical_record(big)
    assert (data, plain) == (b'{"n":1180591620717411303424}', False)
    assert load_canonical(data, plain) == big and isinstance(load_canonical(data, plain)["n"], int)
    assert canonical_record({"v": None}) == (b'{"v":null}', True)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(InvalidArguments, match="record 4: not JSON-serialisable"):
            canonical_record({"v": [1.0, bad]}, 4)
    with pytest.raises(InvalidArguments, match="record: not JSON-serialisable"):
        canonical_record({"v": object()})


def test_validation_digests_equal_request_digest_on_both_paths() -> None:
    """The digest from the canonical parts (every record plain) and from the records
    (one record past 64 bits) are both INV-002's request digest."""
    plain = [{"key": "a", "scope": {}, "x": 1.5}, {"key": "b", "scope": {}, "x": None}]
    mixed = [*plain, {"key": "c", "scope": {}, "x": 2**70}]
    for records in (plain, mixed):
        request = validate_put(records, {"a": 0}, "k", None, max_batch=10)
        assert request.digest == request_digest(records, {"a": 0})
    chunks = [{"id": "a", "embedding": [1.0, 2**70], "scope": {}}]
    upsert = validate_upsert(chunks, None, "k", None, embedding_dim=2, max_batch=10)
    assert upsert.digest == request_digest(chunks, None)
    assert upsert[0].record == chunks[0]


def test_a_validated_affect_record_is_its_canonical_json_and_a_private_copy() -> None:
    rec: dict[str, Any] = {"key": "k", "scope": {"tenant": "t"}, "nested": {"b": [1], "a": 2}}
    item = validate_put([rec], None, "k", None, max_batch=1)[0]
    assert item.record_json == canonical_json(rec).decode("utf-8")
    rec["nested"]["b"].append(2)
    assert item.record == {"key": "k", "scope": {"tenant": "t"}, "nested": {"b": [1], "a": 2}}
    assert item.record is item.record  # parsed once


def test_canonical_batch_gives_every_text_only_when_all_are_plain() -> None:
    batch = CanonicalBatch()
    assert batch.add({"b": 1, "a": None}, 0) == (b'{"a":null,"b":1}', True)
    assert batch.add({"x": 2.5}, 1) == (b'{"x":2.5}', True)
    texts = batch.records_json
    assert texts == [b'{"a":null,"b":1}', b'{"x":2.5}']
    batch.add({"n": 2**70}, 2)
    assert batch.records_json is None
    with pytest.raises(InvalidArguments, match="record 3: not JSON-serialisable"):
        batch.add({"v": math.nan}, 3)


def test_required_scope() -> None:
    assert required_scope({"scope": {}}, "record 0") == {}
    assert required_scope({"scope": {"tenant": "t"}}, "record 0") == {"tenant": "t"}
    with pytest.raises(
        InvalidArguments, match=r"record 2: missing scope \(use \{\} for unscoped\)"
    ):
        required_scope({}, "record 2")
    with pytest.raises(InvalidArguments, match="record 2: scope"):
        required_scope({"scope": {"tenant": 3}}, "record 2")
