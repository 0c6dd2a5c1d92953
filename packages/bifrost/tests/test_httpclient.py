"""bifrost.httpclient.tls_context: one TLS context per process, shared by every client."""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from bifrost.client import AsyncBifrostClient, BifrostClient
from bifrost.httpclient import tls_context

KEY = b"httpclient-key-0123456789abcdef-0123456789"


def _context(http: Any) -> ssl.SSLContext:
    # httpx's transport keeps the context in its httpcore pool.
    return http._transport._pool._ssl_context  # type: ignore[no-any-return]


def test_every_client_shares_the_process_context() -> None:
    shared = tls_context()
    assert isinstance(shared, ssl.SSLContext) and tls_context() is shared
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
    one = BifrostClient("http://127.0.0.1:1", KEY, actor="a", plane="memory")
    two = BifrostClient("https://example.invalid", KEY, actor="a", plane="affect")
    three = AsyncBifrostClient("http://127.0.0.1:1", KEY, actor="a", plane="memory")
    try:
        assert _context(one._http) is shared
        assert _context(two._http) is shared
        assert _context(three._http) is shared
    finally:
        one.close()
        two.close()


def test_it_is_httpxs_default() -> None:
    default = httpx.create_ssl_context()
    assert tls_context().verify_mode == default.verify_mode
    assert tls_context().get_ca_certs() == default.get_ca_certs()
