"""``ratatoskr doctor``: check what the provider needs, print a table, exit non-zero
on a problem. Read-only: it never creates or changes a database or a key."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TextIO

from ratatoskr.provider.preflight import (
    database_problems,
    db_setting,
    fixed_keys,
    inspect_postgres,
    key_problem,
    keys_of,
)
from ratatoskr.provider.registry import Key, entry
from ratatoskr.provider.settings import Plane, Settings, is_dsn, redact_dsn
from ratatoskr.sqlite import (
    MEMORY_PATH,
    StorageError,
    driver_versions,
    inspect_database,
    sqlite_vec_version,
)

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


def _driver() -> list[Check]:
    versions = driver_versions()
    checks = [Check("sqlite driver", OK, f"apsw {versions['apsw']}, SQLite {versions['sqlite']}")]
    try:
        checks.append(Check("sqlite-vec", OK, f"loads, {sqlite_vec_version()}"))
    except Exception as exc:  # any failure to load is the finding itself
        checks.append(Check("sqlite-vec", FAIL, f"cannot load ({type(exc).__name__})"))
    return checks


def _database(settings: Settings, plane: Plane) -> list[Check]:
    path = settings.db_path(plane)
    name = f"{plane} db"
    if path == MEMORY_PATH:
        return [Check(name, WARN, ":memory: - nothing survives a restart")]
    if is_dsn(path):
        return _postgres(settings, plane)
    path = os.path.abspath(path)  # every path in the table is absolute
    problems = database_problems(settings, plane)
    if problems:
        return [Check(name, FAIL, problem) for problem in problems]
    probe = entry(plane).probe
    try:
        report = inspect_database(
            path,
            plane=plane,
            keys=fixed_keys(plane),
            quick=False,
            probe=None if probe is None else lambda conn: probe(conn, settings),
        )
    except StorageError as exc:
        return [Check(name, FAIL, f"{path}: {exc.message}")]
    if not report.exists:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            return [Check(name, FAIL, f"{path}: directory missing ({db_setting(plane)})")]
        return [Check(name, OK, f"{path}: not created yet (created at first start)")]
    detail = f"{path}: schema v{report.schema_version}, integrity {report.integrity}"
    detail += "".join(f", {k} {v}" for k, v in report.meta.items())
    status = OK if report.integrity == "ok" else FAIL
    checks = [Check(name, status, detail + f", mode {report.mode:o}")]
    if isinstance(report.probed, tuple):
        fine, found = report.probed
        checks.append(Check(f"{plane} index cache", OK if fine else WARN, found))
    return checks


def _postgres(settings: Settings, plane: Plane) -> list[Check]:
    """A plane served from PostgreSQL: the same read-only look the preflight makes."""
    name, shown = f"{plane} db", redact_dsn(settings.db_path(plane))
    report = inspect_postgres(settings, plane)
    if report.problems:
        return [Check(name, FAIL, problem) for problem in report.problems]
    detail = f"{shown}: server reachable (PostgreSQL {report.server}), "
    detail += f"pgvector {report.pgvector}" if report.pgvector else "pgvector not installed yet"
    if report.schema_version:
        detail += f", schema v{report.schema_version}"
        detail += "".join(f", {k} {v}" for k, v in report.meta.items())
    else:
        detail += ", schema not created yet (created at first start)"
    return [Check(name, OK, detail)]


def _key(settings: Settings, key: Key) -> Check:
    """The preflight's verdict on ``key`` (``planes.key_problem``), with what was found."""
    name = key.value
    problem = key_problem(settings, key)
    if key is Key.HEIMDALL:
        if problem is not None:
            return Check(name, FAIL, problem)
        if settings.heimdall_key_file is not None:
            mode = stat.S_IMODE(settings.heimdall_key_file.stat().st_mode)
            shown = os.path.abspath(settings.heimdall_key_file)
            return Check(name, OK, f"file {shown} (mode {mode:o})")
        return Check(name, OK, "from RATATOSKR_HEIMDALL_KEY")
    if problem is not None:
        return Check(name, FAIL, "unset while RATATOSKR_HOST is not loopback")
    if settings.vmp_api_key is not None:
        return Check(name, OK, "set")
    return Check(name, WARN, "unset: VMP serves unauthenticated on loopback only")


def run_doctor(settings: Settings, planes: tuple[Plane, ...], *, out: TextIO) -> int:
    """Print the checks as a table; return 1 if any failed, else 0."""
    checks = _driver()
    for plane in planes:
        checks += _database(settings, plane)
    checks += [_key(settings, key) for key in keys_of(planes)]
    width = max(len(c.name) for c in checks)
    out.write(f"{'check'.ljust(width)}  status  detail\n")
    for c in checks:
        out.write(f"{c.name.ljust(width)}  {c.status.ljust(6)}  {c.detail}\n")
    failed = [c for c in checks if c.status == FAIL]
    out.write(f"\n{len(failed)} problem(s)\n" if failed else "\nall good\n")
    return 1 if failed else 0
