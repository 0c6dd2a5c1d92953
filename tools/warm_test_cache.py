"""Collect the suite once, in one process, before pytest-xdist starts its workers.

Each xdist worker collects the whole suite itself. pytest rewrites the asserts of
every test module (and of the plugins that ask for it) and caches the result beside
the module; Python caches the bytecode of every library it imports. In a fresh
clone neither cache exists, and the workers, which start together and collect in
the same order, each build both from scratch: about 10 s of CPU per worker here,
twice that with coverage measuring. One collection first (no coverage, beside mypy
in `make test`) writes both caches, and the workers then read them.

    .venv/bin/python tools/warm_test_cache.py [pytest arguments]

Prints one line; on a failed collection, pytest's whole output and its exit status.
"""

from __future__ import annotations

import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    done = subprocess.run(  # noqa: S603 - this interpreter, pytest and its arguments
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        return done.returncode
    counted = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    print(f"warm_test_cache: {counted} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
