"""The suite's order: tools/test_durations.py sums a durations report per module, and the
root conftest starts the heaviest modules first, each kept whole."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


durations = _load(ROOT / "tools" / "test_durations.py", "_test_durations")
root_conftest = _load(ROOT / "conftest.py", "_root_conftest")

REPORT = """\
============================ slowest durations =============================
12.50s call     tests/test_a.py::test_one[2]
2.00s setup    tests/test_a.py::test_one[2]
0.40s teardown tests/test_a.py::test_two
3.00s call     packages/x/tests/test_b.py::TestK::test_m[memory]
0.20s call     packages/x/tests/test_c.py::test_tiny
(12 durations < 0.005s hidden.  Use -vv to show these durations.)
"""


def test_a_report_is_summed_per_module_and_tiny_modules_left_out() -> None:
    assert durations.module_seconds(REPORT) == {
        "packages/x/tests/test_b.py": 3.0,
        "tests/test_a.py": 14.9,
    }


def test_the_committed_weights_name_modules_that_exist() -> None:
    weights = json.loads((ROOT / "tests" / "durations.json").read_text(encoding="utf-8"))
    assert weights, "tests/durations.json is empty"
    assert all(isinstance(s, float | int) and s > 0 for s in weights.values())
    missing = [m for m in weights if not (ROOT / m).is_file()]
    assert missing == [], "regenerate tests/durations.json (tools/test_durations.py)"


class _Item:
    def __init__(self, nodeid: str, *, slow: bool = False) -> None:
        self.nodeid = nodeid
        self._slow = slow

    def get_closest_marker(self, name: str) -> Any:
        return object() if name == "slow" and self._slow else None


def test_modules_start_heaviest_first_and_stay_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    weights = {"m/heavy.py": 30.0, "m/light.py": 0.6}
    path = tmp_path / "durations.json"
    path.write_text(json.dumps(weights), encoding="utf-8")
    monkeypatch.setattr(root_conftest, "DURATIONS", path)
    items = [
        _Item("m/light.py::a"),
        _Item("m/unknown_fast.py::a"),
        _Item("m/heavy.py::a"),
        _Item("m/unknown_slow.py::a", slow=True),
        _Item("m/light.py::b"),
        _Item("m/heavy.py::b"),
    ]
    order = [i.nodeid for i in root_conftest.heaviest_modules_first(items)]
    assert order == [
        "m/heavy.py::a",
        "m/heavy.py::b",
        "m/unknown_slow.py::a",  # one slow test: 2 s
        "m/light.py::a",
        "m/light.py::b",
        "m/unknown_fast.py::a",  # 0.05 s
    ]


def test_without_weights_the_order_is_by_test_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(root_conftest, "DURATIONS", tmp_path / "absent.json")
    items = [_Item("a.py::x"), _Item("b.py::x", slow=True), _Item("a.py::y")]
    order = [i.nodeid for i in root_conftest.heaviest_modules_first(items)]
    assert order == ["b.py::x", "a.py::x", "a.py::y"]
