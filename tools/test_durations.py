"""Write ``tests/durations.json`` from a pytest run's ``--durations=0`` report.

The root ``conftest.py`` starts the heaviest test modules first, so that pytest-xdist's
work stealing ends the run on short tests instead of one worker finishing a long
module alone. It reads each module's seconds (setup, call and teardown summed) from
``tests/durations.json``; a module missing there is weighed by its test count. The
figures only order the suite: stale ones cost wall time, never a result.

    .venv/bin/python -m pytest -n auto --dist worksteal -q --durations=0 > /tmp/d.txt
    .venv/bin/python tools/test_durations.py /tmp/d.txt
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*([0-9.]+)s (?:setup|call|teardown)\s+(\S+?)::")
OUT = Path(__file__).resolve().parent.parent / "tests" / "durations.json"


def module_seconds(report: str) -> dict[str, float]:
    """Seconds per test module (path as pytest prints it) in a durations report."""
    seconds: dict[str, float] = defaultdict(float)
    for line in report.splitlines():
        match = LINE.match(line)
        if match:
            seconds[match.group(2)] += float(match.group(1))
    return {module: round(s, 1) for module, s in sorted(seconds.items()) if s >= 0.5}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    weights = module_seconds(Path(argv[0]).read_text(encoding="utf-8"))
    OUT.write_text(json.dumps(weights, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(weights)} modules, {sum(weights.values()):.0f} s -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
