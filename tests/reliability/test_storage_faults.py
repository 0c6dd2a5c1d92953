"""Storage faults: a full disk, a read-only file, a corrupt file, a missing directory
(at start, and removed under a running provider). Each must give a clear error — a
wire error with a generic message (a full disk: ``bifrost.insufficient_storage`` 507 on
the Bifrost planes, VMP's ``CAPACITY_EXCEEDED`` 507; otherwise ``bifrost.internal`` and
VMP's ``INTERNAL_ERROR``, 500) or a one-line refusal at start naming the setting —
with nothing partial written and nothing overwritten.

The tmpfs and read-only-mount cases need root (``mount``); they are skipped elsewhere,
except the read-only file, which a non-root user gets with ``chmod``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bifrost.affect import dispatch_affect_call
from bifrost.client import BifrostClient
from bifrost.consumer.testing.helpers import envelope
from bifrost.context import DispatchContext
from bifrost.errors import BifrostError, render_error
from bifrost.memory import dispatch_memory_call
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.sqlite import ConnectionOptions
from ratatoskr.vmp import CapacityExceeded, VmpError, open_vmp_store
from ratatoskr.vmp.client import VmpClient

from .support import (
    MEMORY_DIM,
    VMP_DIM,
    affect_client,
    base,
    check_affect_file,
    check_files,
    check_memory_file,
    check_vmp_file,
    dump_file,
    file_bytes,
    memory_client,
    open_raw,
    provider_env,
    refuse,
    refuse_in_process,
    running,
    vmp_client,
)

GENERIC_500 = (500, "bifrost.internal", "internal error")
FULL = {
    "code": "bifrost.insufficient_storage",
    "message": "database or disk is full",
    "details": {},
}
FILLER = "x" * 1500


# -- helpers ---------------------------------------------------------------------------


@contextmanager
def tmpfs(where: Path, size_kib: int) -> Iterator[Path]:
    """A small tmpfs at ``where`` for the block (root only; skips otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0700", "tmpfs", str(where)],
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` read-only for the block: ``chmod`` for a normal user; root ignores modes,
    so for root a read-only bind mount of the file over itself."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    done = subprocess.run(
        ["mount", "--bind", "-o", "ro", str(path), str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("cannot bind-mount read-only here")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def fill(where: Path, name: str = "filler") -> Path:
    """Fill the filesystem at ``where`` to the last byte."""
    path = where / name
    with path.open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return path


def mem_batch(n: int, prefix: str = "c") -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}{n}-{i}",
            "embedding": [float((n + i + d) % 5) + 1.0 for d in range(MEMORY_DIM)],
            "scope": {"tenant": "t"},
            "content": FILLER,
        }
        for i in range(8)
    ]


def aff_batch(n: int) -> list[dict[str, Any]]:
    return [{"key": f"k{n}-{i}", "scope": {"tenant": "t"}, "state": FILLER} for i in range(8)]


def one_line_refusal(code: int, lines: list[str], setting: str) -> str:
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ratatoskr: {setting}"), lines
    return lines[0]


def seeded_files(root: Path) -> dict[str, str]:
    """A provider's three files with a little data, written through the stores."""
    env = provider_env(root)
    ctx = DispatchContext(actor="seed")
    m = open_memory_store(env["RATATOSKR_MEMORY_DB"], embedding_dim=MEMORY_DIM)
    m.upsert_many(mem_batch(0), idempotency_key="seed", ctx=ctx)
    m.close()
    a = open_affect_store(env["RATATOSKR_AFFECT_DB"])
    a.put_many(aff_batch(0), idempotency_key="seed", ctx=ctx)
    a.close()
    v = open_vmp_store(env["RATATOSKR_VMP_DB"], dim=VMP_DIM)
    for i in range(20):
        v.upsert_vector([float(i), 1.0, 2.0, 3.0], metadata={"i": i})
    v.close()
    return env


DB = {"memory": "RATATOSKR_MEMORY_DB", "affect": "RATATOSKR_AFFECT_DB", "vmp": "RATATOSKR_VMP_DB"}


# -- disk full, at the store (SQLite's max_page_count) ---------------------------------


def _until_full(write: Callable[[int], Any]) -> tuple[int, BaseException]:
    for n in range(1, 10_000):
        try:
            write(n)
        except (BifrostError, VmpError, Exception) as exc:
            return n, exc
    raise AssertionError("never filled up")


def _pages(path: str) -> int:
    return os.path.getsize(path) // 4096


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_disk_full_in_a_bifrost_plane_is_a_507_and_writes_nothing(
    tmp_path: Path, plane: str
) -> None:
    path = str(tmp_path / f"{plane}.db")
    ctx = DispatchContext(actor="writer", scope={"tenant": "t"})
    memory = plane == "memory"

    def opener(**kw: Any) -> Any:
        if memory:
            return open_memory_store(path, embedding_dim=MEMORY_DIM, **kw)
        return open_affect_store(path, **kw)

    verb = "upsert_many" if memory else "put_many"
    batch: Callable[[int], list[dict[str, Any]]] = mem_batch if memory else aff_batch
    dispatch: Callable[..., Any] = dispatch_memory_call if memory else dispatch_affect_call
    opener().close()
    store = opener(options=ConnectionOptions(max_page_count=_pages(path) + 24))

    def write_envelope(n: int) -> dict[str, Any]:
        return envelope(
            verb, {"records": batch(n)}, call_id=f"call-{n}", idempotency_key=f"key-{n}"
        )

    before: dict[str, list[str]] = {}

    def write(n: int) -> None:
        before.clear()
        before.update(dump_file(path))
        dispatch(store, write_envelope(n), ctx)

    failed, exc = _until_full(write)
    assert failed > 1
    assert type(exc).__name__ == "StorageFull"
    status, body = render_error(exc, plane=plane, call_id="call-x")
    assert (status, body["error"]) == (507, FULL)
    assert dump_file(path) == before  # nothing of the failed batch, nothing else either
    # Reads go on; the file holds its invariants.
    get_many = "get_many"
    ids_arg = "ids" if memory else "keys"
    ident = "id" if memory else "key"
    first = [r[ident] for r in batch(1)]
    read = envelope(get_many, {ids_arg: first}, call_id="r")
    assert len(dispatch(store, read, ctx)) == len(first)
    store.close()
    check_files_for(plane, path)
    # With room again, the failed call (same idempotency key) is written, not replayed:
    # a failure records nothing in the ledger.
    store = opener()
    result = dispatch(store, write_envelope(failed), ctx)
    assert result["replayed"] is False
    read = envelope(get_many, {ids_arg: [r[ident] for r in batch(failed)]}, call_id="r2")
    assert len(dispatch(store, read, ctx)) == len(batch(failed))
    store.close()


def check_files_for(plane: str, path: str) -> None:
    {"memory": check_memory_file, "affect": check_affect_file, "vmp": check_vmp_file}[plane](path)


def test_disk_full_in_vmp_is_507_and_consumes_no_id(tmp_path: Path) -> None:
    path = str(tmp_path / "vmp.db")
    open_vmp_store(path, dim=VMP_DIM).close()
    store = open_vmp_store(
        path, dim=VMP_DIM, options=ConnectionOptions(max_page_count=_pages(path) + 6)
    )
    hashes: list[str] = []

    def write(n: int) -> None:
        hashes.append(store.state_hash())
        store.upsert_vector([float(n), 0.0, 1.0, 2.0], metadata={"pad": FILLER, "n": n})

    failed, exc = _until_full(write)
    assert isinstance(exc, CapacityExceeded)
    assert (exc.status, exc.to_body()) == (
        507,
        {"error": "storage is full", "code": "CAPACITY_EXCEEDED"},
    )
    assert store.state_hash() == hashes[-1]
    assert store.record_count() == failed - 1
    store.close()
    check_files_for("vmp", path)
    store = open_vmp_store(path, dim=VMP_DIM)
    assert store.upsert_vector([1.0, 0.0, 1.0, 2.0]).record_id == failed - 1
    store.close()


# -- disk full, over HTTP (a small tmpfs) ----------------------------------------------


def _http_until_full(write: Callable[[int], Any]) -> tuple[int, Any]:
    for n in range(10_000):
        try:
            write(n)
        except (BifrostError, VmpError) as exc:
            return n, exc
    raise AssertionError("never filled up")


@pytest.mark.slow
def test_disk_full_over_http_every_plane(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", 4096) as root:
        # No free space held back: SQLite itself meets the full disk (tests/test_disk_full.py
        # has the reserve).
        env = provider_env(root, RATATOSKR_DISK_RESERVE_BYTES="0")
        reserve = root / "reserve"
        reserve.write_bytes(b"\0" * 768 * 1024)  # freed later to make room again
        with running(tmp_path, env) as server:
            memory = memory_client(base(server, "memory"), scope={"tenant": "t"})
            affect = affect_client(base(server, "affect"), scope={"tenant": "t"})
            vmp = vmp_client(base(server, "vmp"))
            acked_m, exc_m = _http_until_full(
                lambda n: memory.upsert_many(mem_batch(n), idempotency_key=f"m{n}")
            )
            fill(root)
            assert acked_m > 0
            assert isinstance(exc_m, BifrostError)
            assert (exc_m.status, exc_m.wire_code(), exc_m.message, exc_m.details) == (
                507,
                "bifrost.insufficient_storage",
                "database or disk is full",
                {},
            )
            acked_a, exc_a = _http_until_full(
                lambda n: affect.put_many(aff_batch(n), idempotency_key=f"a{n}")
            )
            assert isinstance(exc_a, BifrostError)
            assert (exc_a.status, exc_a.wire_code(), exc_a.message) == (
                507,
                "bifrost.insufficient_storage",
                "database or disk is full",
            )
            acked_v, exc_v = _http_until_full(
                lambda n: vmp.upsert_vector([float(n), 1.0, 2.0, 3.0], metadata={"p": FILLER})
            )
            assert isinstance(exc_v, VmpError)
            assert (exc_v.status, exc_v.code) == (507, "CAPACITY_EXCEEDED")
            # Memory and affect reads need their token's jti recorded in the replay file:
            # while its WAL has room to reuse (it is checkpointed every second) they go
            # on; once a record needs a new page they fail closed (507), because a token
            # that cannot be remembered is never accepted. Never a wrong answer.
            for plane, read, acked in (
                ("memory", lambda: memory.get_many([r["id"] for r in mem_batch(0)]), acked_m),
                ("affect", lambda: affect.get_many([r["key"] for r in aff_batch(0)]), acked_a),
            ):
                got = outcome(read)
                assert got[:2] == (507, "bifrost.insufficient_storage") or (
                    got[0] == "ok" and len(got[1]) == (8 if acked else 0)
                ), (plane, got[:2])
            assert vmp.health()["records"] == acked_v
            # Room again: reads are back, the failed calls left nothing, and the same
            # idempotency keys write (a failure is not recorded).
            (root / "filler").unlink()
            reserve.unlink()
            assert len(memory.get_many([r["id"] for r in mem_batch(0)])) == 8
            assert memory.get_many([r["id"] for r in mem_batch(acked_m)]) == []
            assert memory.search([1.0] * MEMORY_DIM, top_k=3)
            assert affect.get_many([r["key"] for r in aff_batch(acked_a)]) == []
            assert memory.upsert_many(mem_batch(acked_m), idempotency_key=f"m{acked_m}") == {
                "upserted": 8,
                "replayed": False,
            }
            assert affect.put_many(aff_batch(acked_a), idempotency_key=f"a{acked_a}") == {
                "written": 8,
                "replayed": False,
            }
            assert vmp.upsert_vector([0.0, 1.0, 2.0, 3.0])["record_id"] == acked_v
            memory.close()
            affect.close()
            vmp.close()
        log = "".join(server.output)
        assert "code=bifrost.insufficient_storage" in log  # the operator's clue, no content
        assert FILLER not in log
        counts = check_files(env)
        assert counts["memory"] == 8 * (acked_m + 1)
        assert counts["affect"] == 8 * (acked_a + 1)
        assert counts["vmp"] == acked_v + 1


@pytest.mark.slow
def test_disk_full_at_start_is_a_one_line_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a byte free: SQLite says SQLITE_FULL. 8 KiB free: the header is written but
    the 32 KiB WAL index cannot grow, which SQLite reports only as SQLITE_IOERR_SHMSIZE
    (before the fix that read "database I/O error")."""
    with tmpfs(tmp_path / "full", 512) as root:
        env = provider_env(root)
        filler = fill(root)
        code, lines = refuse_in_process(monkeypatch, capsys, tmp_path, env)
        assert "full" in one_line_refusal(code, lines, "RATATOSKR_MEMORY_DB")
        for leftover in root.glob("memory.db*"):
            leftover.unlink()
        with filler.open("r+b") as fh:
            fh.truncate(filler.stat().st_size - 8192)
        code, lines = refuse(tmp_path, env)  # a real process: its whole stderr is one line
        assert one_line_refusal(code, lines, "RATATOSKR_MEMORY_DB").endswith(
            "database or disk is full"
        )
        filler.unlink()
        # What a refused start may leave (an empty database header) is no obstacle.
        with running(tmp_path, env) as server, memory_client(base(server, "memory")) as memory:
            assert memory.health()["status"] == "ok"
        check_files(env)


# -- read-only, corrupt, missing: refused at start -------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("plane", ["memory", "affect", "vmp"])
def test_read_only_file_is_refused_at_start(
    tmp_path: Path, plane: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = seeded_files(tmp_path)
    path = Path(env[DB[plane]])
    before = file_bytes(str(path))
    with read_only(path):
        code, lines = refuse_in_process(monkeypatch, capsys, tmp_path, env, "--plane", plane)
    line = one_line_refusal(code, lines, DB[plane])
    assert "not readable and writable" in line
    assert file_bytes(str(path)) == before


CORRUPTIONS: dict[str, Callable[[bytearray], bytearray]] = {
    "header": lambda b: bytearray(os.urandom(100)) + b[100:],
    "page": lambda b: b[:4096] + bytearray(os.urandom(4096)) + b[8192:],
    "truncated": lambda b: b[: len(b) // 2],
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("plane", "how"),
    [("memory", "header"), ("affect", "page"), ("vmp", "truncated"), ("memory", "page")],
)
def test_corrupt_file_is_refused_at_start_and_kept(
    tmp_path: Path,
    plane: str,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = seeded_files(tmp_path)
    path = Path(env[DB[plane]])
    path.write_bytes(bytes(CORRUPTIONS[how](bytearray(path.read_bytes()))))
    before = file_bytes(str(path))

    def beside() -> dict[str, bytes]:
        # The file and what lives next to it (the memory plane's index sidecar, which
        # the seeding open wrote): a refused start adds, changes and removes nothing.
        return {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(path.name)}

    files_before = beside()
    code, lines = refuse_in_process(monkeypatch, capsys, tmp_path, env, "--plane", plane)
    line = one_line_refusal(code, lines, DB[plane])
    assert "corrupt" in line or "integrity" in line
    assert file_bytes(str(path)) == before
    assert beside() == files_before
    assert not [name for name in files_before if name.endswith(("-wal", "-shm", "-journal"))]


@pytest.mark.slow
@pytest.mark.parametrize("plane", ["memory", "affect", "vmp"])
def test_missing_directory_is_refused_at_start(
    tmp_path: Path, plane: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = provider_env(tmp_path)
    env[DB[plane]] = str(tmp_path / "nowhere" / f"{plane}.db")
    code, lines = refuse_in_process(monkeypatch, capsys, tmp_path, env)
    line = one_line_refusal(code, lines, DB[plane])
    assert "does not exist" in line
    assert not (tmp_path / "nowhere").exists()
    assert list(tmp_path.glob("*.db")) == []  # nothing was created for the other planes


# -- the directory removed under a running provider ------------------------------------


@pytest.mark.slow
def test_directory_removed_while_serving_fails_writes_instead_of_losing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite keeps writing to a deleted file; before the fix every such write was
    acknowledged and then gone at the next start."""
    data = tmp_path / "data"
    data.mkdir()
    env = provider_env(data)
    with running(tmp_path, env) as server:
        memory = memory_client(base(server, "memory"), scope={"tenant": "t"})
        affect = affect_client(base(server, "affect"), scope={"tenant": "t"})
        vmp = vmp_client(base(server, "vmp"))
        memory.upsert_many(mem_batch(0), idempotency_key="m0")
        affect.put_many(aff_batch(0), idempotency_key="a0")
        vmp.upsert_vector([1.0, 2.0, 3.0, 4.0])
        shutil.rmtree(data)
        outcomes = _writes_after_removal(memory, affect, vmp)
        removed = "database file was removed or replaced while open"
        assert outcomes == {
            "memory": (503, "bifrost.unavailable", removed),
            "affect": (503, "bifrost.unavailable", removed),
            "vmp": (
                500,
                "INTERNAL_ERROR",
                "storage error: database file was removed or replaced while open",
            ),
        }
        # Reads fail too now: every call must record its token's jti in the replay file
        # beside the (removed) database, and a token that cannot be remembered is never
        # accepted (it could be replayed).
        assert outcome(lambda: memory.get_many([r["id"] for r in mem_batch(0)]))[:2] == (
            503,
            "bifrost.unavailable",
        )
        for c in (memory, affect, vmp):
            c.close()
    assert "type=StorageUnavailable" in "".join(server.output)
    code, lines = refuse_in_process(monkeypatch, capsys, tmp_path, env)
    assert "does not exist" in one_line_refusal(code, lines, "RATATOSKR_MEMORY_DB")


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """``("ok", result)`` or the error as ``(status, code, message)``."""
    try:
        return ("ok", call())
    except BifrostError as exc:
        return (exc.status, exc.wire_code(), exc.message)
    except VmpError as exc:
        return (exc.status, exc.code, exc.message)


def _writes_after_removal(
    memory: BifrostClient, affect: BifrostClient, vmp: VmpClient
) -> dict[str, tuple[int, str, str]]:
    out: dict[str, tuple[int, str, str]] = {}
    for name, call in (
        ("memory", lambda: memory.upsert_many(mem_batch(1), idempotency_key="m1")),
        ("affect", lambda: affect.put_many(aff_batch(1), idempotency_key="a1")),
        ("vmp", lambda: vmp.upsert_vector([4.0, 3.0, 2.0, 1.0])),
    ):
        try:
            call()
        except BifrostError as exc:
            out[name] = (exc.status, exc.wire_code(), exc.message)
        except VmpError as exc:
            out[name] = (exc.status, exc.code, exc.message)
        except httpx.HTTPError as exc:  # pragma: no cover - a diagnosis, not an outcome
            raise AssertionError(f"{name}: {type(exc).__name__}") from exc
        else:
            out[name] = (200, "acknowledged", "")
    return out


# -- a file truncated under a running provider -----------------------------------------


@pytest.mark.slow
def test_file_truncated_while_serving_is_a_500_not_a_dead_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With memory-mapped reads (SQLite's mmap_size, 256 MiB here before the fix) the
    next read of a file truncated behind SQLite's back raised SIGBUS and killed the
    process — every plane of the combined provider, not just the damaged one."""
    env = provider_env(tmp_path)
    with running(tmp_path, env) as server:
        memory = memory_client(base(server, "memory"), scope={"tenant": "t"})
        affect = affect_client(base(server, "affect"), scope={"tenant": "t"})
        vmp = vmp_client(base(server, "vmp"))
        for n in range(6):
            memory.upsert_many(mem_batch(n), idempotency_key=f"m{n}")
            affect.put_many(aff_batch(n), idempotency_key=f"a{n}")
            vmp.upsert_vector([float(n), 1.0, 2.0, 3.0], metadata={"pad": FILLER})
        for plane in ("affect", "vmp"):
            path = env[DB[plane]]
            with open_raw(path) as conn:  # move the data from the WAL into the main file
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        # Read once, so SQLite maps the grown file; then cut both files short.
        assert affect.list(limit=50)["items"]
        assert vmp.search_vector([1.0, 2.0, 3.0, 4.0], 3)
        for plane in ("affect", "vmp"):
            os.truncate(env[DB[plane]], 8192)
        # Each read either still answers right (from SQLite's page cache) or fails
        # with the generic error — it never answers wrong and never kills the process.
        vmp_corrupt = (
            500,
            "INTERNAL_ERROR",
            "storage error: database file is corrupt or not a database",
        )
        for _ in range(3):
            got = outcome(lambda: affect.get("k3-3")["state"])
            assert got in (("ok", FILLER), GENERIC_500)
            got = outcome(lambda: len(affect.list(limit=50)["items"]))
            assert got in (("ok", 48), GENERIC_500)
            got = outcome(
                lambda: [h["record_id"] for h in vmp.search_vector([0, 1, 2, 3], 2)["results"]]
            )
            assert got in (("ok", [0, 1]), vmp_corrupt)
        # The undamaged plane, and the process, carry on.
        assert server.proc.poll() is None
        assert len(memory.get_many([r["id"] for r in mem_batch(5)])) == 8
        for c in (memory, affect, vmp):
            c.close()
    assert server.proc.returncode in (0, -15), server.proc.returncode
    code, lines = refuse_in_process(monkeypatch, capsys, tmp_path, env)
    assert "corrupt" in one_line_refusal(code, lines, "RATATOSKR_AFFECT_DB")
