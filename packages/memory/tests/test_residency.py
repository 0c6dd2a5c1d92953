"""The pages of a reopened index's mapped codes are given back after searches read them
(ratatoskr.memory.residency), and never once the index wrote to the map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ratatoskr.memory import sidecar
from ratatoskr.memory.index import VectorIndex, scope_items
from ratatoskr.memory.records import unit_rows
from ratatoskr.memory.residency import Released

DIM = 64
N = 3000
BUDGET = 16 << 10


def _units(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return unit_rows(rng.standard_normal((n, DIM))).astype(np.float32)


def _mapped_index(tmp_path: Path, budget: int) -> tuple[VectorIndex, str, list[str]]:
    """An index of N rows in 30 tenants × 10 end users, written to a sidecar and adopted
    from it (mapped) with ``budget``."""
    ids = [f"c{i:05d}" for i in range(N)]
    scopes = [scope_items({"tenant": f"t{i % 30}", "end_user": f"u{i % 10}"}) for i in range(N)]
    built = VectorIndex(DIM)
    built.load_units(ids, _units(N, 1), scopes)
    path = str(tmp_path / "x.db-index")
    sidecar.write(path, built.image(), lineage="test")
    image = sidecar.read(path, DIM, lineage="test")
    assert image is not None
    index = VectorIndex(DIM)
    index.map_budget = budget
    index.adopt(image)
    return index, path, ids


def _mapped_kb(path: str) -> int:
    """Resident kB of this process's mappings of ``path``."""
    total, current = 0, None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                current = parts[5] if len(parts) >= 6 else None
            elif parts[0] == "Rss:" and current == path:
                total += int(parts[1])
    return total


def _search_everywhere(index: VectorIndex, queries: np.ndarray) -> list[list[tuple[str, float]]]:
    out = []
    for j, q in enumerate(queries):
        for scope in ({}, {"tenant": f"t{j % 30}"}, {"tenant": f"t{j % 30}", "end_user": "u3"}):
            out.append([(c.chunk_id, c.score) for c in index.search(q, 10, scope, [])])
    return out


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_searches_give_mapped_pages_back_and_answer_as_before(tmp_path: Path) -> None:
    kept, path, _ = _mapped_index(tmp_path, budget=1 << 40)  # the old behaviour
    released, _, _ = _mapped_index(tmp_path, budget=BUDGET)
    assert kept._released == [] and len(released._released) == 2
    queries = _units(40, 2)
    # The same candidates and bits, released or not.
    assert _search_everywhere(released, queries) == _search_everywhere(kept, queries)
    del kept
    released.search(queries[0], 10, {}, [])
    # Codes and residuals are 2 × 192 kB mapped: kept mapped, all of it would stay
    # resident; released, at most about the budget and a block per array.
    assert _mapped_kb(path) <= 2 * (2 * BUDGET // 1024 + 8)


def test_a_write_to_the_map_stops_the_releases(tmp_path: Path) -> None:
    index, _, ids = _mapped_index(tmp_path, budget=BUDGET)
    row = index.row_of(ids[7])
    assert row is not None
    new = _units(1, 9)
    # Same scope: written in place into the copy-on-write map (a private page).
    index.upsert(ids[7], new[0], {"tenant": "t7", "end_user": "u7"})
    assert index.row_of(ids[7]) == row
    written = (index._codes[row].copy(), index._resid[row].copy())
    _search_everywhere(index, _units(20, 3))
    # Had the pages been given back, the row would read the file's old codes again.
    assert np.array_equal(index._codes[row], written[0])
    assert np.array_equal(index._resid[row], written[1])
    assert index._released == []
    top = index.search(new[0], 1, {"tenant": "t7", "end_user": "u7"}, [])
    assert top[0].chunk_id == ids[7]


def test_only_large_mapped_arrays_are_released(tmp_path: Path) -> None:
    anon = np.zeros((100, DIM), dtype=np.int8)
    assert Released.of(anon, 0, budget=0) is None
    index, _, _ = _mapped_index(tmp_path, budget=1 << 30)
    assert Released.of(index._codes, 0, budget=1 << 30) is None
    found = Released.of(index._codes, 0, budget=0)
    assert found is not None and found.still_clean(0) and not found.still_clean(1)


def test_a_large_gather_from_a_released_map_takes_the_same_rows(tmp_path: Path) -> None:
    index, _, _ = _mapped_index(tmp_path, budget=BUDGET)
    rng = np.random.default_rng(4)
    rows = np.sort(rng.choice(N, 2000, replace=False)).astype(np.int64)
    whole = np.array(index._codes)  # a copy of the whole map
    assert np.array_equal(index._take(index._codes, rows), whole[rows])
    assert np.array_equal(index._take(index._resid, rows), np.array(index._resid)[rows])
    few = rows[::100]  # 20 rows scattered over the whole map
    assert np.array_equal(index._take(index._codes, few), whole[few])
    shuffled = rows[rng.permutation(rows.size)]
    assert np.array_equal(index._take(index._codes, shuffled), whole[shuffled])
