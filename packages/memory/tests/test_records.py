"""The stored form of a chunk: every JSON number the wire accepts inside an embedding
comes back equal and with its JSON type — through ``get``, ``get_many`` and
``search`` — and a search that drops the embedding scores exactly as one that keeps it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bifrost.context import DispatchContext
from bifrost.envelope import decode_json
from bifrost.errors import InvalidArguments
from bifrost.jsoncodec import json_loads_exact
from bifrost.memory.validation import validate_embedding, validate_search, validate_upsert
from ratatoskr.memory import RatatoskrMemoryStore, records
from ratatoskr.memory.records import StoredChunk, unit_float64

from .conftest import DIM


def exact(value: Any) -> Any:
    """``value`` with every number tagged by its JSON type and floats by their bits, so
    ``exact(a) == exact(b)`` fails for 1 vs 1.0 and for 0.0 vs -0.0 (``==`` does not)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, list):
        return [exact(v) for v in value]
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def zeros(n: int) -> str:
    return ", 0.0" * n


# JSON text as a client sends it, parsed by the wire's own decoder.
WIRE_EMBEDDINGS = {
    "floats": f"[0.1, -0.0, 5e-324, 1e308, -1e308, 2.2250738585072014e-308, {1 / 3!r}, -1.5]",
    "exponent forms": "[1E2, 1e-2, -2.5E+3, 0e0, -0e0, 1.0, 2.0, 3.0]",
    "max double and subnormals": f"[1.7976931348623157e308, 4.9e-324, -5e-324{zeros(5)}]",
    "ints": "[1, 0, 2, -3, 0, 0, 0, 7]",
    "mixed": "[1, 0.5, -0.0, 2, 5e-324, 0, 1e308, 3]",
    "big ints": "[100000000000000000000000000000, 9007199254740993, -1, 0, 0, 0, 0, 1]",
    "int near the double max": "[1" + "0" * 308 + ", -0.0, 0, 0, 0, 0, 0, 1]",
    "one int among floats": f"[1{zeros(7)}]",
}
CASES = sorted(WIRE_EMBEDDINGS)


def record(case: str, field: str = "embedding", **extra: Any) -> dict[str, Any]:
    emb = decode_json(WIRE_EMBEDDINGS[case].encode())
    return {
        "id": f"c-{case}",
        field: emb,
        "scope": {"tenant": "t"},
        "content": f"content {case}",
        "nested": {"big": 10**25, "neg0": -0.0},
        **extra,
    }


def without(rec: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k != key}


def test_wire_parses_what_the_cases_claim() -> None:
    types = {c: {type(x) for x in decode_json(WIRE_EMBEDDINGS[c].encode())} for c in CASES}
    assert types["floats"] == types["exponent forms"] == {float}
    assert types["ints"] == {int}
    assert types["mixed"] == types["one int among floats"] == {int, float}
    assert math.copysign(1.0, decode_json(b"[-0.0]")[0]) == -1.0


@pytest.mark.parametrize("case", CASES)
def test_every_read_returns_the_numbers_with_their_types(
    store: RatatoskrMemoryStore, ctx: DispatchContext, case: str
) -> None:
    rec = record(case)
    store.upsert_many([rec], idempotency_key="k", ctx=ctx)
    want = exact({**rec, "revision": 1})
    assert exact(store.get(rec["id"])) == want
    assert exact(store.get_many([rec["id"], rec["id"]])) == [want]
    (row,) = store.search(rec["embedding"], top_k=1)
    assert exact(row["chunk"]) == exact(rec)
    (lean,) = store.search(rec["embedding"], top_k=1, include={"embedding": False})
    assert exact(lean["chunk"]) == exact(without(rec, "embedding"))
    assert exact(lean["recalled_view"]) == exact(without(rec, "embedding"))
    # Bit-identical to the score of the embedding parsed from JSON (what schema v1 did).
    q = unit_float64(validate_embedding(rec["embedding"], DIM))
    parsed = np.asarray(rec["embedding"], dtype=np.float64)
    assert row["score"] == lean["score"] == float(records.exact_scores([parsed], q)[0])


@pytest.mark.parametrize("case", ["floats", "mixed"])
def test_the_vector_field_and_an_opaque_vector_beside_an_embedding(
    store: RatatoskrMemoryStore, ctx: DispatchContext, case: str
) -> None:
    under_vector = {**record(case, field="vector"), "id": "v"}
    both = {**record(case), "id": "b", "vector": [1, 2.5, -0.0]}  # "embedding" wins
    store.upsert_many([under_vector, both], idempotency_key="k", ctx=ctx)
    for rec in (under_vector, both):
        assert exact(store.get(rec["id"])) == exact({**rec, "revision": 1})
    rows = store.search(under_vector["vector"], top_k=2, include={"embedding": False})
    chunks = {r["chunk_id"]: r["chunk"] for r in rows}
    assert exact(chunks["v"]) == exact(without(under_vector, "vector"))
    assert exact(chunks["b"]) == exact(without(both, "embedding"))  # keeps its "vector"
    full = {r["chunk_id"]: r["chunk"] for r in store.search(under_vector["vector"], top_k=2)}
    assert exact(full) == exact({"v": under_vector, "b": both})


def test_rewrite_switches_between_the_forms(
    store: RatatoskrMemoryStore, ctx: DispatchContext
) -> None:
    floats, ints = record("floats"), {**record("ints"), "id": "c-floats"}
    for n, rec in enumerate([floats, ints, floats], start=1):
        store.upsert_many([rec], idempotency_key=f"k{n}", ctx=ctx)
        assert exact(store.get("c-floats")) == exact({**rec, "revision": n})


def test_a_search_decodes_only_what_its_answer_carries(
    store: RatatoskrMemoryStore, ctx: DispatchContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Equal embeddings: every chunk is a near-tie candidate, two make the answer.
    recs = [{**record("floats"), "id": f"f{i}"} for i in range(5)]
    store.upsert_many(recs, idempotency_key="k", ctx=ctx)
    parsed: list[dict[str, Any]] = []

    def load_json(text: str) -> dict[str, Any]:
        parsed.append(real_load(text))
        return parsed[-1]

    def no_full_record(self: StoredChunk) -> dict[str, Any]:
        raise AssertionError("the embedding list was built")

    real_load = records.load_json
    monkeypatch.setattr(records, "load_json", load_json)
    monkeypatch.setattr(StoredChunk, "record", no_full_record)
    rows = store.search(recs[0]["embedding"], top_k=2, include={"embedding": False})
    assert [r["chunk_id"] for r in rows] == ["f0", "f1"]
    assert [p["id"] for p in parsed] == ["f0", "f1"]  # the other candidates stay undecoded
    assert all("embedding" not in p for p in parsed)


# -- the stored form alone, over arbitrary numbers --------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
numbers = st.one_of(finite, st.integers(min_value=-(10**30), max_value=10**30))


@given(
    st.lists(numbers, min_size=DIM, max_size=DIM),
    st.sampled_from(["embedding", "vector"]),
)
def test_stored_form_round_trips_any_valid_embedding(values: list[Any], field: str) -> None:
    try:
        validate_embedding(values, DIM)
    except InvalidArguments:
        return  # zero or overflowing norm: refused before anything is stored
    rec = {"id": "x", field: values, "scope": {}, "n": [1, 1.0, -0.0]}
    form = records.stored_form(rec)
    binary = all(type(v) is float for v in values)
    assert (form.embedding_key is not None) == (form.embedding_f64 is not None) == binary
    stored = StoredChunk(form.record_json, form.embedding_key, form.embedding_f64, 1)
    assert exact(stored.record()) == exact(rec)
    assert exact(stored.without_embedding()) == exact(without(rec, field))
    assert stored.vector().tobytes() == np.asarray(values, dtype=np.float64).tobytes()


# -- unit vectors (one helper for every backend) ---------------------------------------


def test_unit_rows_scale_before_normalising() -> None:
    """Huge and subnormal components neither overflow nor vanish."""
    rows = np.array([[1e308, 1e308, 0.0], [5e-324, 0.0, 5e-324], [3.0, 4.0, 0.0]])
    units = records.unit_rows(rows)
    half = math.sqrt(0.5)
    assert units[0].tolist() == pytest.approx([half, half, 0.0])
    assert units[1].tolist() == pytest.approx([half, 0.0, half])
    assert units[2].tolist() == [0.6, 0.8, 0.0]
    assert np.all(np.isfinite(units))


def test_unit_rows_of_equal_rows_are_bit_equal_wherever_they_sit() -> None:
    rng = np.random.default_rng(3)
    row = rng.standard_normal(384)
    batch = rng.standard_normal((64, 384))
    batch[0] = batch[37] = batch[63] = row
    units = records.unit_rows(batch)
    alone = records.unit_rows(row.reshape(1, -1))[0]
    for at in (0, 37, 63):
        assert units[at].tobytes() == alone.tobytes()
    assert records.unit_float64(row.tolist()).tobytes() == alone.tobytes()


def test_unit_float32_rows() -> None:
    empty = records.unit_float32_rows([], DIM)
    assert empty.shape == (0, DIM) and empty.dtype == np.float32
    units = records.unit_float32_rows([[3.0, 4.0], [0.0, -2.0]], 2)
    assert units.dtype == np.float32
    assert units.tolist() == [[np.float32(0.6), np.float32(0.8)], [0.0, -1.0]]


def test_exact_scores_are_the_cosines_of_the_unit_rows() -> None:
    query = records.unit_float64([1.0, 0.0])
    raw = [np.array([2.0, 0.0]), np.array([0.0, 5.0]), np.array([-1e300, 0.0])]
    assert records.exact_scores(raw, query).tolist() == [1.0, 0.0, -1.0]
    assert records.exact_scores([], query).shape == (0,)


def test_search_rows_rank_best_first_ties_by_id_and_cut_at_top_k() -> None:
    def stored(cid: str, emb: list[float], **extra: Any) -> StoredChunk:
        form = records.stored_form({"id": cid, "embedding": emb, "scope": {}, **extra})
        return StoredChunk(form.record_json, form.embedding_key, form.embedding_f64, 2)

    found = {
        "c": stored("c", [1.0, 0.0]),
        "b": stored("b", [2.0, 0.0], vector="opaque"),
        "a": stored("a", [0.0, 1.0]),
    }
    query = validate_search([1.0, 0.0], 2, None, None, None, None, embedding_dim=2, max_top_k=5)
    rows = records.search_rows(found, unit_float64(query.vector), query)
    assert [(r["chunk_id"], r["score"], r["revision"]) for r in rows] == [
        ("b", 1.0, 2),
        ("c", 1.0, 2),
    ]
    assert rows[0]["chunk"]["embedding"] == [2.0, 0.0]
    bare = validate_search(
        [0.0, 1.0], 5, None, None, None, {"embedding": False}, embedding_dim=2, max_top_k=5
    )
    rows = records.search_rows(found, unit_float64(bare.vector), bare)
    assert [r["chunk_id"] for r in rows] == ["a", "b", "c"]
    # Without its embedding the record keeps an opaque ``vector`` field.
    assert rows[1]["chunk"] == {"id": "b", "scope": {}, "vector": "opaque"}
    assert records.search_rows({}, unit_float64(bare.vector), bare) == []


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        finite,
        st.integers(min_value=-(10**40), max_value=10**40),
        st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**18, 10**19]),
        st.text(alphabet='0123456789 x"\\é', max_size=30),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=20,
)


@given(json_values)
def test_load_json_reads_exactly_what_the_exact_parser_reads(value: Any) -> None:
    text = records.encode({"v": value})
    assert exact(records.load_json(text)) == exact(json_loads_exact(text))
    assert exact(records.load_json(text)) == exact({"v": value})


# -- a batch's stored forms and unit rows, from one matrix -----------------------------


def _narrowed(form: records.StoredForm) -> records.StoredForm:
    """``form`` as a batch stores it: a float32-exact binary embedding as its float32
    blob (``narrow_rows`` of its one row), anything else unchanged."""
    if form.embedding_f64 is None:
        return form
    row = np.frombuffer(form.embedding_f64, "<f8").reshape(1, -1)
    f32 = records.narrow_rows(row)[0]
    if f32 is None:
        return form
    return records.StoredForm(form.record_json, form.embedding_key, None, f32)


@given(
    st.lists(
        st.tuples(
            st.lists(numbers, min_size=DIM, max_size=DIM),
            st.sampled_from(["embedding", "vector"]),
            st.booleans(),
        ),
        max_size=6,
    )
)
# A float32-exact embedding: stored as its float32 blob (found by a fresh-clone run).
@example(batch=[([0.0] * (DIM - 1) + [1.0], "embedding", False)])
def test_stored_forms_of_a_batch_are_each_records_stored_form_and_unit_rows(
    batch: list[tuple[list[Any], str, bool]],
) -> None:
    """What a write stores for a batch is, byte for byte, each record's own
    ``stored_form`` and ``unit_float32_rows`` of the validated embeddings (both forms,
    -0.0, subnormals, huge values and ints that must stay ints)."""
    recs = []
    for i, (values, field, opaque) in enumerate(batch):
        try:
            validate_embedding(values, DIM)
        except InvalidArguments:
            continue
        rec: dict[str, Any] = {"id": f"c{i}", field: values, "scope": {"tenant": "t"}}
        if opaque and field == "embedding":
            rec["vector"] = [1, 2.5]  # an opaque field beside the embedding
        recs.append(rec)
    request = validate_upsert(recs, None, "k", None, embedding_dim=DIM, max_batch=100)
    forms, units = records.stored_forms(request.items, DIM)
    assert forms == [_narrowed(records.stored_form(c.record)) for c in request]
    expected = records.unit_float32_rows([c.embedding for c in request], DIM)
    assert units.dtype == np.float32 and units.shape == (len(recs), DIM)
    assert units.tobytes() == expected.tobytes()


@given(st.lists(finite, min_size=1, max_size=40))
def test_a_query_list_normalises_to_the_bits_of_its_array(values: list[float]) -> None:
    """A search's list goes through ``np.fromiter``; the unit query is the one the
    array gives (and the reference's bits), whatever the magnitudes."""
    if not any(values):
        return  # zero norm: refused by validation
    from_list = records.unit_float64(values)
    from_array = records.unit_rows(np.asarray(values, dtype=np.float64).reshape(1, -1))[0]
    assert from_list.tobytes() == from_array.tobytes()


@pytest.mark.parametrize("dim", [1, 2, 7, 8, 9, 16, 127, 128, 129, 255, 384, 768, 1536, 4097])
def test_a_query_of_any_length_normalises_to_the_bits_of_unit_rows(dim: int) -> None:
    """The vector path of ``unit_float64`` against ``unit_rows`` of the same row, for
    lengths around numpy's summation blocks, at every magnitude."""
    rng = np.random.default_rng(dim)
    for scale in (5e-324, 1e-300, 1.0, 1e300):
        row = rng.standard_normal(dim) * scale
        if not np.any(row):
            row[0] = scale
        alone = records.unit_rows(row.reshape(1, -1))[0]
        assert records.unit_float64(row.tolist()).tobytes() == alone.tobytes()
        assert records.unit_float64(row).tobytes() == alone.tobytes()


def test_stored_forms_of_records_orjson_cannot_write_alone() -> None:
    """A record holding an integer past 64 bits is written by the standard library
    (``plain`` false): its stored form is the one ``stored_form`` gives, in both forms."""
    recs: list[dict[str, Any]] = [
        {"id": "a", "embedding": [0.5] * DIM, "scope": {}, "n": 2**70, "m": -(2**64)},
        {"id": "b", "embedding": [1] * DIM, "scope": {}, "n": 2**70},
        {"id": "c", "embedding": [0.25] * DIM, "scope": {}, "n": 2**62},
    ]
    request = validate_upsert(recs, None, "k", None, embedding_dim=DIM, max_batch=10)
    assert [c.plain for c in request] == [False, False, True]
    forms, _ = records.stored_forms(request.items, DIM)
    alone = [records.stored_form(c.record) for c in request]
    assert [(f.record_json, f.embedding_key) for f in forms] == [
        (f.record_json, f.embedding_key) for f in alone
    ]
    # 0.5 and 0.25 are float32-exact: their blobs are the float32 of stored_form's float64.
    assert [f.embedding_f32 for f in forms] == [
        None
        if f.embedding_f64 is None
        else np.frombuffer(f.embedding_f64, "<f8").astype("<f4").tobytes()
        for f in alone
    ]
    assert all(f.embedding_f64 is None for f in forms)
    assert json_loads_exact(forms[0].record_json)["n"] == 2**70
