"""Serve a VMP app over real HTTP on a free loopback port, for test_upload_http.py.

``python upload_server.py DB MAX_SNAPSHOT_BYTES`` (``default``: the cap derived from
the store) prints the port, then serves without a key (the loopback default) until
terminated.
"""

from __future__ import annotations

import socket
import sys

import uvicorn

from ratatoskr.vmp import build_vmp_app, open_vmp_store

DIM = 16


def main() -> None:
    db, cap = sys.argv[1:3]
    store = open_vmp_store(db, dim=DIM)
    app = build_vmp_app(
        store,
        api_key=None,
        allow_no_key=True,
        max_snapshot_bytes=None if cap == "default" else int(cap),
    )
    # Bound here and handed over: no window in which another process takes the port.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
