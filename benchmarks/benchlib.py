"""Helpers shared by the side-by-side benchmarks: percentiles, the machine's
description, and a ``ratatoskr serve`` subprocess on loopback that is always stopped
(started by :mod:`ratatoskr.provider.testing`, as the tests start theirs).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Protocol

import numpy as np

from ratatoskr.provider.testing import ServerProcess, start_serve

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def pct(xs: Sequence[float], q: float) -> float:
    """The q-th percentile (0…100) of ``xs`` (linear interpolation, as numpy)."""
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if len(xs) else float("nan")


def p50(xs: Sequence[float]) -> float:
    return pct(xs, 50)


def p99(xs: Sequence[float]) -> float:
    return pct(xs, 99)


def fmt_ms(seconds: float) -> str:
    if seconds != seconds:  # NaN
        return "—"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def version_of(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def machine_line() -> str:
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {ram_gib():.0f} GiB RAM;"
        f" {platform.system()} {platform.release()}; Python {platform.python_version()}"
    )


def unit_rows(m: np.ndarray) -> np.ndarray:
    m64 = np.asarray(m, dtype=np.float64)
    unit: np.ndarray = m64 / np.linalg.norm(m64, axis=1, keepdims=True)
    return unit


def ratatoskr_server(args: Sequence[str], env: dict[str, str], cwd: str) -> ServerProcess:
    """``ratatoskr serve <args>`` on a free 127.0.0.1 port, ready to serve, through the
    launcher the tests use (:mod:`ratatoskr.provider.testing`); use it as a context
    manager so that it is always stopped, workers and all."""
    return start_serve(["serve", *args, "--host", "127.0.0.1"], env, cwd)


class Progress(Protocol):
    """What the benchmarks ask of a progress bar (tqdm's, or the no-op one)."""

    def update(self, n: int = 1) -> object: ...

    def set_postfix_str(self, s: str) -> None: ...

    def set_description_str(self, s: str) -> None: ...


class _NullProgress:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def set_description_str(self, s: str) -> None:
        pass


@contextlib.contextmanager
def progress(total: int, desc: str, enabled: bool = True) -> Iterator[Progress]:
    """A tqdm bar (on stderr) when tqdm is installed and wanted; a no-op otherwise."""
    try:
        from tqdm import tqdm  # noqa: PLC0415 - optional
    except ImportError:  # pragma: no cover - tqdm is in the bench group
        enabled = False
    if not enabled:
        yield _NullProgress()
        return
    bar = tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr)
    try:
        yield bar
    finally:
        bar.close()
