"""``run_parity``: drive two stores through the same envelopes with the
transport-free dispatch and compare what the wire would carry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bifrost.context import DispatchContext
from bifrost.envelope import Envelope
from bifrost.errors import BifrostError
from bifrost.planes import plane_spec

__all__ = ["SCORE_TOLERANCE", "assert_wire_equal", "outcome", "run_parity"]

SCORE_TOLERANCE = 1e-5
# Server-assigned timestamps are informational, not logical state.
_IGNORED_KEYS = frozenset({"recorded_at"})


def outcome(store: Any, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext) -> Any:
    """``{"ok": True, "result": …}`` or ``{"ok": False, "code": …, "details": …}``, from
    the dispatch of the plane ``ctx.plane`` names (another value → ``ValueError``)."""
    dispatch = plane_spec(ctx.plane).dispatch
    try:
        return {"ok": True, "result": dispatch(store, envelope, ctx)}
    except BifrostError as exc:
        return {"ok": False, "code": exc.wire_code(ctx.plane), "details": exc.details}


def assert_wire_equal(a: Any, b: Any, path: str = "$") -> None:
    """Deep equality, except ``score`` floats within :data:`SCORE_TOLERANCE` and
    ``recorded_at`` values ignored."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys_a, keys_b = set(a), set(b)
        assert keys_a == keys_b, f"{path}: keys differ: {sorted(keys_a ^ keys_b)}"
        for k in sorted(keys_a):
            if k in _IGNORED_KEYS:
                continue
            if k == "score":
                assert isinstance(a[k], float) and isinstance(b[k], float), f"{path}.score type"
                assert abs(a[k] - b[k]) <= SCORE_TOLERANCE, f"{path}.score {a[k]} != {b[k]}"
            else:
                assert_wire_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: lengths {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_wire_equal(x, y, f"{path}[{i}]")
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"


def run_parity(
    store_a: Any,
    store_b: Any,
    envelopes: Iterable[Envelope | Mapping[str, Any]],
    ctx: DispatchContext,
) -> list[Any]:
    """Dispatch every envelope to both stores (plane from ``ctx.plane``) and
    assert the outcomes agree; returns store_a's outcomes."""
    outcomes = []
    for i, env in enumerate(envelopes):
        oa, ob = outcome(store_a, env, ctx), outcome(store_b, env, ctx)
        assert_wire_equal(oa, ob, f"envelope[{i}]")
        outcomes.append(oa)
    return outcomes
