"""The operator's commands: ``backup``, ``restore`` and ``stats`` of a plane's file.

The SQLite mechanics live in ``ratatoskr.sqlite`` (``backup``, ``inuse``,
``stats``); this module adds what only the provider knows — which file a plane
is configured to use, the schema version this release migrates each plane to,
the fixed setting each plane's file records (all from ``registry.PLANE_TABLE``) — and turns
every refusal into one line naming the setting or flag at fault.

The token cache beside a plane file (``<db>.replay``) is neither backed up
nor replaced by a restore: it remembers token ids only until their tokens
expire (``RATATOSKR_TOKEN_MAX_LIFETIME_S``, 300 s at most), so a copy is stale
within minutes, while the live one must stay where it is to keep refusing the
tokens accepted before the restore.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict
from typing import Any, TextIO

from ratatoskr.provider.preflight import db_setting
from ratatoskr.provider.registry import PLANE_TABLE, PLANES, entry
from ratatoskr.provider.settings import (
    ConfigError,
    Plane,
    Settings,
    is_dsn,
    redact_dsn,
)
from ratatoskr.sqlite import (
    MEMORY_PATH,
    DatabaseInUse,
    DatabaseStats,
    ForeignDatabase,
    InvalidBackup,
    MetaSetting,
    PlaneFile,
    StorageError,
    StorageUnavailable,
    backup_database,
    database_stats,
    restore_database,
    token_cache_path,
)

__all__ = [
    "OperationFailed",
    "plane_file",
    "run_backup",
    "run_compact",
    "run_restore",
    "run_stats",
]

# The planes a backup or restore covers (the others name what to use instead).
BACKUP_PLANES: tuple[Plane, ...] = tuple(
    name for name, plane in PLANE_TABLE.items() if plane.backup_hint is None
)


class OperationFailed(Exception):
    """The command was valid but the work failed (a full disk, an I/O error)."""


def plane_file(settings: Settings, plane: Plane) -> PlaneFile:
    """What a sound file of ``plane`` is under ``settings``: the newest schema version
    this release knows, and the fixed setting with the variable that sets it."""
    described = entry(plane)
    fixed = described.fixed
    meta = {fixed.key: MetaSetting(fixed.wanted(settings), fixed.variable)} if fixed else {}
    return PlaneFile(plane, described.newest_version(settings), meta)


def _database_file(settings: Settings, plane: Plane, doing: str) -> str:
    hint = entry(plane).backup_hint
    if hint is not None:
        raise ConfigError(hint)
    path = settings.db_path(plane)
    if path == MEMORY_PATH:
        raise ConfigError(f"{db_setting(plane)} is {MEMORY_PATH}: there is no file to {doing}")
    if is_dsn(path):
        raise ConfigError(
            f"{db_setting(plane)} is a PostgreSQL DSN: there is no file to {doing} "
            "(use pg_dump / pg_restore)"
        )
    return path


def _plane_files(settings: Settings) -> list[str]:
    """Every configured plane file and every file SQLite or a token cache keeps beside
    it: none may be a backup's destination or a restore's source."""
    files: list[str] = []
    for plane in PLANES:
        path = settings.db_path(plane)
        if path == MEMORY_PATH or is_dsn(path):
            continue
        # SQLite and the stores put their files beside the resolved path: a symlinked
        # setting names them through the link's target.
        for spelled in dict.fromkeys((path, os.path.realpath(path))):
            files += [spelled, *(f"{spelled}{s}" for s in _SQLITE_BESIDE + entry(plane).beside)]
        replay = token_cache_path(path)  # a SQLite file of its own, WAL too
        files += [replay, *(f"{replay}{s}" for s in _SQLITE_BESIDE)]
    return files


_SQLITE_BESIDE = ("-wal", "-shm", "-journal")


def _not_a_plane_file(settings: Settings, path: str, flag: str) -> None:
    files = _plane_files(settings)
    real = os.path.realpath(path)
    # A cache's temporary files too (a sidecar writer removes stale ones).
    if _is_one_of(path, files) or any(real.startswith(f"{f}.tmp-") for f in files):
        raise ConfigError(f"{flag}: {path} is a plane's live database or a file beside one")


def _directory_exists(path: str, named_by: str) -> None:
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise ConfigError(f"{named_by}: the directory of {path} does not exist")


def _is_one_of(candidate: str, paths: list[str]) -> bool:
    real = os.path.realpath(candidate)
    for path in paths:
        if os.path.realpath(path) == real:
            return True
        if os.path.exists(path) and os.path.exists(candidate) and os.path.samefile(path, candidate):
            return True
    return False


def run_backup(settings: Settings, plane: Plane, dest: str, *, overwrite: bool, out: TextIO) -> int:
    """``ratatoskr backup``: a verified, owner-only copy of the live plane file at ``dest``.

    Raises ConfigError (one line; nothing written) for a refusal, OperationFailed when
    the copy could not be made (nothing written either).
    """
    source = _database_file(settings, plane, "back up")
    setting = db_setting(plane)
    if not os.path.isfile(source):
        raise ConfigError(f"{setting}: {source} does not exist; there is nothing to back up")
    _not_a_plane_file(settings, dest, "--to")
    _directory_exists(dest, "--to")
    if os.path.isdir(dest):
        raise ConfigError(f"--to: {dest} is a directory; give a file name")
    if os.path.lexists(dest) and not overwrite:
        raise ConfigError(f"--to: {dest} exists; choose a new name or pass --overwrite")
    expected = plane_file(settings, plane)
    try:
        result = backup_database(source, dest, expected, overwrite=overwrite)
    except InvalidBackup as exc:
        raise ConfigError(f"{setting}: {source} {exc.message}; no backup written") from None
    except StorageError as exc:
        raise OperationFailed(f"backup failed: {exc.message}; nothing written to {dest}") from None
    fixed = "".join(f", {k} {v.value}" for k, v in expected.meta.items())
    out.write(
        f"ratatoskr: backed up {plane} to {dest}: {_size(result.bytes)}, schema v"
        f"{result.schema_version}{fixed}, integrity ok, in {result.seconds:.2f} s\n"
    )
    return 0


def run_restore(settings: Settings, plane: Plane, source: str, *, out: TextIO) -> int:
    """``ratatoskr restore``: replace the plane's file with a verified copy of ``source``.

    Raises ConfigError (one line; the plane's file untouched) for a refusal — a corrupt
    or foreign backup, a provider with the file open — and OperationFailed when the
    work failed (the plane's file untouched too).
    """
    target = _database_file(settings, plane, "restore into")
    setting = db_setting(plane)
    if not os.path.isfile(source):
        raise ConfigError(f"--from: {source} does not exist or is not a file")
    _not_a_plane_file(settings, source, "--from")
    _directory_exists(target, setting)
    expected = plane_file(settings, plane)
    # The token cache is claimed too: a provider has it open whenever it serves the plane.
    also = [token_cache_path(target)] if entry(plane).takes_tokens else []
    try:
        result = restore_database(source, target, expected, also_claim=also)
    except InvalidBackup as exc:
        raise ConfigError(f"--from: {source} {exc.message}; {target} left as it was") from None
    except DatabaseInUse as exc:
        who = f" (pid {exc.pid})" if exc.pid else ""
        raise ConfigError(
            f"{setting}: {target} is open in another process{who}; stop the provider "
            "serving it, then restore (nothing was changed)"
        ) from None
    except StorageError as exc:
        raise OperationFailed(f"restore failed: {exc.message}; {target} left as it was") from None
    for spelled in dict.fromkeys((target, os.path.realpath(target))):
        for suffix in entry(plane).beside:  # caches of the file just replaced
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{spelled}{suffix}")
    older = (
        f"; it is migrated to v{expected.schema_version} when the provider starts"
        if result.schema_version < expected.schema_version
        else ""
    )
    kept = f"; the replay cache {also[0]} was kept" if also and os.path.exists(also[0]) else ""
    verb = "replaced" if result.replaced else "created"
    out.write(
        f"ratatoskr: restored {plane} from {source}: {verb} {target} ({_size(result.bytes)}, "
        f"schema v{result.schema_version}{older}){kept}\n"
    )
    return 0


def collect_stats(settings: Settings, planes: tuple[Plane, ...]) -> dict[str, dict[str, Any]]:
    """Per plane: its file's figures (``ratatoskr.sqlite.database_stats``) and its
    token cache's; ``error`` instead when the file cannot be read."""
    report: dict[str, dict[str, Any]] = {}
    for plane in planes:
        path = settings.db_path(plane)
        if path == MEMORY_PATH:
            report[plane] = {"path": path, "exists": False, "in_memory": True}
            continue
        if is_dsn(path):
            from ratatoskr.provider.pgoperate import pg_stats  # noqa: PLC0415 - psycopg only for a DSN

            try:
                report[plane] = pg_stats(settings, plane)
            except ConfigError as exc:
                report[plane] = {"path": redact_dsn(path), "postgresql": True, "error": str(exc)}
            continue
        try:
            figures = _stats_dict(database_stats(path, plane=plane))
            if entry(plane).takes_tokens:
                replay = database_stats(token_cache_path(path), plane="replay")
                figures["replay"] = {
                    "path": replay.path,
                    "exists": replay.exists,
                    "file_bytes": replay.file_bytes,
                    "wal_bytes": replay.wal_bytes,
                    "entries": sum(t.rows for t in replay.tables if t.name == "replay_jti"),
                }
        except StorageError as exc:
            figures = {"path": path, "error": exc.message}
        report[plane] = figures
    return report


def _stats_dict(stats: DatabaseStats) -> dict[str, Any]:
    data = asdict(stats)
    data["planes"] = list(stats.planes)
    data["free_bytes"] = stats.free_bytes
    data["tables"] = {t.name: {"rows": t.rows, "kind": t.kind} for t in stats.tables}
    return data


def run_stats(settings: Settings, planes: tuple[Plane, ...], *, as_json: bool, out: TextIO) -> int:
    """``ratatoskr stats``: print the figures as aligned tables or one JSON object; 1 when
    a plane's file could not be read."""
    report = collect_stats(settings, planes)
    if as_json:
        out.write(json.dumps({"planes": report}, indent=2, sort_keys=True) + "\n")
    else:
        out.write(_render(report))
    return 1 if any("error" in entry for entry in report.values()) else 0


def _render(report: dict[str, dict[str, Any]]) -> str:
    summary: list[tuple[str, ...]] = [
        ("plane", "file", "schema", "size", "wal", "free", "ledger", "tombstones", "replay")
    ]
    tables: list[tuple[str, ...]] = [("plane", "table", "kind", "rows")]
    for plane, e in report.items():
        if e.get("in_memory"):
            summary.append((plane, e["path"], "-", "in memory", "-", "-", "-", "-", "-"))
        elif "error" in e:
            summary.append((plane, e["path"], f"error: {e['error']}", "", "", "", "", "", ""))
        elif not e["exists"]:
            summary.append((plane, e["path"], "not created yet", "", "", "", "", "", ""))
        elif e.get("postgresql"):  # pgoperate.pg_stats: no WAL, free list or replay file
            size = f"{_size(e['total_bytes'])} (schema {e['schema']})"
            summary.append((plane, e["path"], f"v{e['schema_version']}", size, *["-"] * 5))
            for name, t in e["tables"].items():
                tables.append((plane, name, t["kind"], str(t["rows"])))
        else:
            replay = e.get("replay")
            summary.append(
                (
                    plane,
                    e["path"],
                    f"v{e['schema_version']}",
                    _size(e["file_bytes"]),
                    _size(e["wal_bytes"]),
                    f"{_size(e['free_bytes'])} ({e['freelist_pages']} pages)",
                    f"{e['ledger_entries']} ({e['ledger_expired']} expired)",
                    str(e["tombstones"]),
                    f"{replay['entries']} ids, {_size(replay['file_bytes'] + replay['wal_bytes'])}"
                    if replay and replay["exists"]
                    else "-",
                )
            )
            for name, t in e["tables"].items():
                tables.append((plane, name, t["kind"], str(t["rows"])))
    text = _align(summary)
    if len(tables) > 1:
        text += "\n" + _align(tables, right={3})
    return text


def _align(rows: list[tuple[str, ...]], right: set[int] | None = None) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if right and i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def run_compact(
    settings: Settings,
    planes: tuple[Plane, ...],
    *,
    full: bool,
    out: TextIO,
    vectors: bool = True,
) -> int:
    """``ratatoskr compact``: give each plane file's free pages back to the filesystem,
    beside a provider serving it (incremental steps; ``full``: one ``VACUUM``; memory's
    vector table is rebuilt first unless ``vectors`` is false — one transaction that
    makes writers wait ~0.1 ms per live chunk). Raises
    ConfigError for a missing or foreign file, OperationFailed when the work failed."""
    for plane in planes:
        path = settings.db_path(plane)
        if path == MEMORY_PATH:
            out.write(f"ratatoskr: {plane}: {MEMORY_PATH}, nothing to compact\n")
            continue
        if is_dsn(path):
            from ratatoskr.provider.pgoperate import pg_compact  # noqa: PLC0415 - psycopg only for a DSN

            pg = pg_compact(settings, plane)
            out.write(
                f"ratatoskr: {plane}: VACUUM (ANALYZE) of {pg.tables} tables in schema "
                f"{pg.schema}, {_size(pg.bytes_before)} -> {_size(pg.bytes_after)}, "
                f"{pg.seconds:.1f} s (space is reused, not returned; see `compact --help`)\n"
            )
            continue
        try:
            report = entry(plane).compact(path, full=full, vectors=vectors)
        except (ForeignDatabase, StorageUnavailable) as exc:
            raise ConfigError(f"{db_setting(plane)}: {path}: {exc.message}") from None
        except StorageError as exc:
            raise OperationFailed(f"{plane}: compaction failed ({exc.message})") from None
        out.write(
            f"ratatoskr: {plane}: {report.method}, {_size(report.bytes_before)} -> "
            f"{_size(report.bytes_after)}, {report.free_pages_before} -> "
            f"{report.free_pages_after} free pages, {report.seconds:.1f} s\n"
        )
    return 0
