"""``ratatoskr export``: a plane's records as JSON Lines (:mod:`ratatoskr.provider.portable`).

The store is read in keyset pages of :data:`PAGE` records in id order, each page
one snapshot (the stores' ``export_page``): beside a serving provider, a record
that exists unchanged for the whole export is written exactly once; one
written or deleted during the export appears as a page saw it, or not at all
(what a later import of the file then holds is the plane as of each page). A
memory chunk expired under ``RATATOSKR_MEMORY_RETENTION_S`` is not exported: every
verb already treats it as gone, and an import elsewhere would bring it back.

A file target is written to a temporary file beside it (mode 0600: it holds
personal data), flushed to disk and renamed over the target, so a reader never
sees half an export and a failed one leaves nothing; ``-`` writes to stdout.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any

from ratatoskr.provider.operate import OperationFailed
from ratatoskr.provider.portable import Progress, encode, header, open_store, parse_scope
from ratatoskr.provider.settings import ConfigError, Plane, Settings

__all__ = ["PAGE", "export_lines", "run_export"]

PAGE = 1000


def export_lines(store: Any, plane: Plane, scope: dict[str, str]) -> Iterator[tuple[bytes, int]]:
    """Each page of ``store`` as its lines and how many records they hold."""
    after: str | None = None
    while True:
        page, after = store.export_page(after, PAGE, scope)
        if plane == "memory":
            lines = [
                encode({"record": c.record, "revision": c.revision, "written_at": c.written_at})
                for c in page
            ]
        else:
            lines = [
                encode(
                    {
                        "key": k.key,
                        "revision": k.revision,
                        "history": [
                            {"record": rec, "revision": rev, "recorded_at": at}
                            for rev, rec, at in k.history
                        ],
                    }
                )
                for k in page
            ]
        if lines:
            yield b"".join(lines), len(lines)
        if after is None:
            return


def _write(out: IO[bytes], settings: Settings, plane: Plane, scope: dict[str, str]) -> int:
    progress = Progress("exported", "chunks" if plane == "memory" else "keys")
    with open_store(settings, plane, create=False) as store:
        out.write(encode(header(settings, plane, scope, time.time())))
        for data, n in export_lines(store, plane, scope):
            out.write(data)
            progress.add(n)
    progress.clear()
    return progress.count


def run_export(settings: Settings, plane: Plane, target: str, scope_text: str | None) -> int:
    """Export ``plane`` (limited to records whose scope contains ``--scope``) to
    ``target`` (``-``: stdout). Raises ConfigError, OperationFailed."""
    scope = parse_scope(scope_text)
    noun = "chunks" if plane == "memory" else "keys"
    started = time.monotonic()
    if target == "-":
        count = _write(sys.stdout.buffer, settings, plane, scope)
        sys.stdout.buffer.flush()
        where = "stdout"
    else:
        directory = os.path.dirname(os.path.abspath(target))
        if not os.path.isdir(directory):
            raise ConfigError(f"--to: {directory}: no such directory")
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=directory)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as out:
                count = _write(out, settings, plane, scope)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, target)
        except OSError as exc:
            _remove(temp)
            raise OperationFailed(f"--to: cannot write {target} ({exc.strerror})") from None
        except BaseException:
            _remove(temp)
            raise
        where = target
    elapsed = time.monotonic() - started
    print(
        f"ratatoskr: exported {count:,} {noun} of the {plane} plane to {where} in {elapsed:.1f} s",
        file=sys.stderr,
    )
    return 0


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
