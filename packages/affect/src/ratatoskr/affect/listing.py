"""Keyset pages of ``list`` under a scope filter, driven by the ``affect_scope`` index.

A filter ``scope_all`` / ``scope_any`` is rewritten as a union of
conjunctions (``scope_all ∪ member`` for each compatible member of
``scope_any``; just ``scope_all`` when ``scope_any`` is empty or has a member
already implied by it). Each non-empty conjunction is walked in key order from
the ``affect_scope`` rows of its *driving* axis — the one with the fewest rows
after the cursor, counted up to a bound — and the other axes are probed by
primary key. Every conjunction yields at most ``limit + 1`` keys after the
cursor; merging them (deduplicated) gives the page's keys plus one to tell
whether more follow. An empty conjunction walks ``affect_current`` itself.

The walks bind every parameter as ``+?``, the same plans (the same primary-key
searches): with a bare ``?`` this SQLite (built with STAT4) looks at the bound
values when it plans an ordered walk, so every call re-prepared the statement
(see ``store.py``; measured in docs/decisions.md).

The page's records are then read in the same snapshot and checked once more
with bifrost's ``matches_scope`` on the decoded stored scope — the
authoritative rule; the index only decides which keys are looked at. The
cursor is the last key of the page, so writes between pages can neither
repeat nor skip a key that stays in scope.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from typing import Any

import apsw
import orjson

from bifrost.records import load_canonical
from bifrost.scope import matches_scope

# Rows counted per axis when choosing the driving axis: enough to tell a
# selective axis from a broad one, cheap enough to do for every list call.
_SELECTIVITY_PROBE = 1024
_SQL_CHUNK = 500
# orjson reads an integer beyond 64 bits as a float; each such integer has at least 19
# digits (-(2**63) - 1 has 19, 2**64 has 20), so a text without a run of 19 is safe.
# Spelled out: CPython's engine runs it ~2.7x faster than "[0-9]{19}".
_LONG_NUMBER = re.compile("[0-9]" * 19)


def load_record(text: str) -> dict[str, Any]:
    """A stored record (canonical JSON) parsed exactly: orjson alone unless the text
    holds a run of 19 digits, which may be such an integer; then bifrost's exact parse.
    (Timings: docs/decisions.md.) A text orjson
    refuses (nested past its 1024 levels: the standard library's writer goes deeper
    when a caller raised the recursion limit) takes the exact parse too."""
    if _LONG_NUMBER.search(text) is None:
        try:
            return load_canonical(text, True)
        except orjson.JSONDecodeError:
            pass
    return load_canonical(text, False)


def load_scope(text: str) -> dict[str, str]:
    """A stored scope: strings only, so orjson alone reads it exactly."""
    scope: dict[str, str] = load_canonical(text, True)
    return scope


def conjunctions(
    scope_all: dict[str, str], scope_any: list[dict[str, str]]
) -> list[dict[str, str]]:
    """The filter as a union of conjunctions (``[]`` = nothing can match)."""
    if not scope_any:
        return [dict(scope_all)]
    out: list[dict[str, str]] = []
    seen: set[frozenset[tuple[str, str]]] = set()
    for member in scope_any:
        merged = dict(scope_all)
        if any(merged.get(axis, value) != value for axis, value in member.items()):
            continue  # contradicts scope_all: this member can never match
        merged.update(member)
        if merged == scope_all:
            return [dict(scope_all)]  # a member implied by scope_all matches everything it does
        frozen = frozenset(merged.items())
        if frozen not in seen:
            seen.add(frozen)
            out.append(merged)
    return out


def _driving_axis(conn: apsw.Connection, conj: dict[str, str], after: str) -> str:
    if len(conj) == 1:
        return next(iter(conj))
    best: tuple[int, str] | None = None
    for axis, value in sorted(conj.items()):
        count = int(
            conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM affect_scope"
                " WHERE axis = +? AND value = +? AND key > +? LIMIT +?)",
                (axis, value, after, _SELECTIVITY_PROBE),
            ).fetchall()[0][0]  # type: ignore[arg-type]
        )
        if best is None or count < best[0]:
            best = (count, axis)
    assert best is not None
    return best[1]


def _conjunction_keys(
    conn: apsw.Connection, conj: dict[str, str], after: str, want: int
) -> list[str]:
    """The first ``want`` keys after ``after`` whose current scope contains ``conj``."""
    if not conj:
        rows = conn.execute(
            "SELECT key FROM affect_current WHERE key > +? ORDER BY key LIMIT +?", (after, want)
        ).fetchall()
        return [str(r[0]) for r in rows]
    drive = _driving_axis(conn, conj, after)
    sql = ["SELECT s.key FROM affect_scope AS s WHERE s.axis = +? AND s.value = +? AND s.key > +?"]
    params: list[Any] = [drive, conj[drive], after]
    for axis, value in sorted(conj.items()):
        if axis == drive:
            continue
        sql.append(
            " AND EXISTS (SELECT 1 FROM affect_scope AS t"
            " WHERE t.axis = +? AND t.value = +? AND t.key = s.key)"
        )
        params += [axis, value]
    sql.append(" ORDER BY s.key LIMIT +?")
    params.append(want)
    return [str(r[0]) for r in conn.execute("".join(sql), params).fetchall()]


def _merge_unique(streams: Iterable[list[str]], want: int) -> list[str]:
    out: list[str] = []
    for key in heapq.merge(*streams):
        if out and out[-1] == key:
            continue
        out.append(key)
        if len(out) == want:
            break
    return out


def list_page(
    conn: apsw.Connection,
    *,
    scope_all: dict[str, str],
    scope_any: list[dict[str, str]],
    limit: int,
    after_key: str | None,
) -> dict[str, Any]:
    """One ``list`` page, read inside the caller's snapshot ``conn``.

    Keys are compared as SQLite ``BINARY`` text (UTF-8 bytes), which orders
    exactly like Python ``str`` comparison (code points) for valid keys.
    """
    # "" sorts before every key (keys are non-empty), so it stands for "from the start".
    after = "" if after_key is None else after_key
    want = limit + 1
    keys = _merge_unique(
        (_conjunction_keys(conn, c, after, want) for c in conjunctions(scope_all, scope_any)),
        want,
    )
    page, more = keys[:limit], len(keys) > limit
    rows = fetch_current(conn, page)
    items: list[dict[str, Any]] = []
    for key in page:
        row = rows.get(key)
        if row is None:
            continue
        record, scope, revision, recorded_at = row
        if matches_scope(scope, scope_all, scope_any):
            items.append({**record, "revision": revision, "recorded_at": recorded_at})
    return {"items": items, "next_after_key": page[-1] if more else None}


def fetch_current(
    conn: apsw.Connection, keys: Sequence[str]
) -> dict[str, tuple[dict[str, Any], dict[str, str], int, str]]:
    """Current ``(record, scope, revision, recorded_at)`` of the keys that exist: each
    current row and the history row it points at (its ``head``)."""
    out: dict[str, tuple[dict[str, Any], dict[str, str], int, str]] = {}
    for start in range(0, len(keys), _SQL_CHUNK):
        part = keys[start : start + _SQL_CHUNK]
        marks = ",".join("?" * len(part))
        for key, record_json, scope_json, revision, recorded_at in conn.execute(
            "SELECT c.key, h.record_json, c.scope_json, c.revision, h.recorded_at"
            " FROM affect_current AS c JOIN affect_history AS h ON h.id = c.head"
            f" WHERE c.key IN ({marks})",
            part,
        ):
            # Decoding is most of a page's time (see load_record).
            out[str(key)] = (
                load_record(str(record_json)),
                load_scope(str(scope_json)),
                int(revision),
                str(recorded_at),
            )
    return out
