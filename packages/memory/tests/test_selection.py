"""Selection reads that ``forget`` uses: every id of a scope, from the scope classes,
against a model of the writes (the same random writes as test_index_layout)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from ratatoskr.memory.index import VectorIndex
from ratatoskr.memory.records import unit_float32_rows

from .test_index_layout import DIM, ops, scopes, vector


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, axes=scopes.filter(bool))
def test_ids_in_scope_are_every_id_whose_scope_holds_the_axes(
    ops: list[tuple[Any, ...]], axes: dict[str, str]
) -> None:
    index = VectorIndex(DIM, capacity=16)
    model: dict[str, dict[str, str]] = {}
    for n, op in enumerate(ops):
        if op[0] == "upsert":
            ids = [f"c{i:03d}" for i in dict.fromkeys(op[1])]
            vecs = [vector(int(cid[1:]), n) for cid in ids]
            index.upsert_many(ids, unit_float32_rows(vecs, DIM), [op[2]] * len(ids))
            model.update(dict.fromkeys(ids, op[2]))
        elif op[0] == "delete":
            index.remove(f"c{op[1]:03d}")
            model.pop(f"c{op[1]:03d}", None)
        else:
            index.compact(room=op[1])
        expected = sorted(
            cid for cid, scope in model.items() if all(scope.get(k) == v for k, v in axes.items())
        )
        assert index.ids_in_scope(axes) == expected


def test_ids_in_scope_of_an_unknown_value_are_none() -> None:
    index = VectorIndex(DIM, capacity=16)
    index.upsert_many(["a"], unit_float32_rows([vector(1, 0)], DIM), [{"tenant": "t"}])
    assert index.ids_in_scope({"tenant": "t"}) == ["a"]
    assert index.ids_in_scope({"tenant": "u"}) == []
    assert index.ids_in_scope({"tenant": "t", "end_user": "x"}) == []
