"""Helpers shared by the side-by-side benchmarks: percentiles, the machine's
description, and a ``ratatoskr serve`` subprocess on loopback that is always stopped.
"""

from __future__ import annotations

import contextlib
import os
import platform
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Protocol

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RATATOSKR = Path(sys.executable).with_name("ratatoskr")


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


class Server:
    """``ratatoskr serve`` in a subprocess on 127.0.0.1, an ephemeral port; always stopped."""

    def __init__(self, args: Sequence[str], env: dict[str, str], cwd: str) -> None:
        self.args = [str(RATATOSKR), "serve", *args, "--host", "127.0.0.1", "--port", "0"]
        self.env = {**os.environ, **env}
        self.cwd = cwd
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""
        self._log: list[str] = []

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(
            self.args,
            env=self.env,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            self._log.append(line)
            if line.startswith("ratatoskr: serving "):
                url = line.split("serving ", 1)[1].split(",")[0].strip()
                # "memory at http://…/memory" (all planes) or "http://…" (one plane)
                self.base_url = url.split(" at ", 1)[-1].rsplit("/memory", 1)[0]
                break
        if not self.base_url:
            self.stop()
            raise RuntimeError("ratatoskr serve did not start:\n" + "".join(self._log))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


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
