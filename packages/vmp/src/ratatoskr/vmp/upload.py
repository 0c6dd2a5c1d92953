"""A snapshot upload: capped, spooled to an unnamed temporary file, then restored.

The body is never held in memory. It is refused as early as its bytes allow: a
Content-Length above the cap before a byte is read, then as soon as the snapshot's
own header is in (a foreign blob, or one announcing more than the cap), and any byte
past the size it announced.
"""

from __future__ import annotations

import tempfile
from typing import IO

import anyio
from starlette.requests import ClientDisconnect, Request

from ratatoskr.vmp.bodies import SNAPSHOT_TYPE, declared_length, require_type
from ratatoskr.vmp.errors import CapacityExceeded, InternalError, InvalidArgument, PayloadTooLarge
from ratatoskr.vmp.offload import in_thread
from ratatoskr.vmp.snapshot import HEADER_SIZE, declared_snapshot_size, length_mismatch
from ratatoskr.vmp.store import VmpStore

# An upload reaches the spool file in writes of about this size, each in a worker thread.
_SPOOL_WRITE_BYTES = 1 << 20


async def restore_upload(
    request: Request, store: VmpStore, cap: int, spool_dir: str | None
) -> None:
    """Restore ``store`` from the snapshot in the request's body (at most ``cap`` bytes),
    spooled to a temporary file in ``spool_dir`` (None: the system's)."""
    require_type(request, SNAPSHOT_TYPE)
    declared = declared_length(request)
    if declared is not None and declared > cap:
        # Answered before a byte of the body is read: a client that sent
        # ``Expect: 100-continue`` never sends it.
        raise _too_large(cap)
    # Unnamed (O_TMPFILE where there is one) and owner-only: nothing else can
    # open it, and it is gone when closed, whatever happens in between.
    spool = await in_thread(_open_spool, spool_dir)
    try:
        try:
            await _spool_snapshot(request, spool, cap)
        except ClientDisconnect:
            raise InvalidArgument("the upload ended before its body did") from None
        await in_thread(spool.seek, 0)
        await in_thread(store.restore_from_file, spool)
    finally:
        # Shielded: a cancelled request (client gone) must still free the spool now.
        with anyio.CancelScope(shield=True):
            await in_thread(spool.close)


def _write_all(spool: IO[bytes], pieces: list[bytes]) -> None:
    try:
        spool.writelines(pieces)
    except OSError as exc:
        raise CapacityExceeded("no space to receive the snapshot") from exc


async def _spool_snapshot(request: Request, spool: IO[bytes], cap: int) -> None:
    """Copy the request body into ``spool``, refusing it as early as its bytes allow.

    The cap is counted here, whatever Content-Length said or whether there was one
    (chunked). Once the first HEADER_SIZE bytes are in, the snapshot's own header
    says how long it is: a foreign blob (400) or one announcing more than the cap
    (413) is refused there, and so is any byte beyond the announced size (400).
    """
    declared = declared_length(request)
    limit = cap
    head = b""
    pending: list[bytes] = []
    pending_size = received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if len(head) < HEADER_SIZE:
            head += chunk[: HEADER_SIZE - len(head)]
            if len(head) == HEADER_SIZE:
                size = declared_snapshot_size(head)
                if size > cap:
                    raise _too_large(cap)
                if declared not in (None, size):
                    raise length_mismatch()
                limit = size
        if received > limit:
            raise _too_large(cap) if limit == cap else length_mismatch()
        pending.append(chunk)
        pending_size += len(chunk)
        if pending_size >= _SPOOL_WRITE_BYTES:
            await in_thread(_write_all, spool, pending)
            pending, pending_size = [], 0
    await in_thread(_write_all, spool, pending)
    await in_thread(spool.flush)


def _open_spool(directory: str | None) -> IO[bytes]:
    try:
        return tempfile.TemporaryFile(mode="w+b", dir=directory)
    except OSError as exc:
        raise InternalError(f"no spool file for the upload ({type(exc).__name__})") from exc


def _too_large(cap: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"a snapshot upload is at most {cap} bytes")
