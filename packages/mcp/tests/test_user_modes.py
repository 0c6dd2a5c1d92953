"""Who a tool call may reach, in-process (``MemoryTools`` over a local file): by default
every call names its user and one without is refused with nothing read or written; a
server pinned to one user (``--user``) and a call bound to one (an HTTP token's user) are
that user's only; only ``allow_tenant_wide`` lets a call reach every user of the tenant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bifrost.errors import Forbidden, InvalidArguments
from ratatoskr.mcp.backend import LocalBackend
from ratatoskr.mcp.tools import MemoryTools

from .conftest import TENANT
from .hash_embedder import HashEmbedder


def _stored(backend: LocalBackend) -> list[tuple[str, str, str | None]]:
    """Every record of the file: id, content, end_user (what a refused call must not change)."""
    page = backend.granted({}).call("scan", {"limit": 1000, "include": {"embedding": False}})
    return sorted(
        (str(r["id"]), str(r["content"]), r["scope"].get("end_user")) for r in page["items"]
    )


@pytest.fixture
def bobs(tools: MemoryTools) -> str:
    """Bob's memory, and one of Alice's; the id of Bob's."""
    tools.remember("alice likes green tea", user_id="alice")
    return tools.remember("bob's diagnosis: a secret", user_id="bob")["id"]


# Each tool called with no user_id: (name, call).
_NO_USER: list[tuple[str, Callable[[MemoryTools, str], Any]]] = [
    ("remember", lambda t, _: t.remember("a new note")),
    ("recall", lambda t, _: t.recall("diagnosis")),
    ("list_memories", lambda t, _: t.list_memories()),
    ("forget", lambda t, bob: t.forget(bob)),
    ("forget_all", lambda t, _: t.forget_all()),
]


@pytest.mark.parametrize(("name", "run"), _NO_USER, ids=[n for n, _ in _NO_USER])
def test_a_call_without_user_id_is_refused_and_changes_nothing(
    tools: MemoryTools,
    backend: LocalBackend,
    bobs: str,
    name: str,
    run: Callable[[MemoryTools, str], Any],
) -> None:
    before = _stored(backend)
    assert tools.user_mode == "required"
    with pytest.raises(InvalidArguments) as caught:
        run(tools, bobs)
    assert caught.value.details == {"field": "user_id"}
    assert caught.value.message.startswith("user_id is required")
    assert _stored(backend) == before


def test_alice_cannot_reach_bobs_memories(
    tools: MemoryTools, backend: LocalBackend, bobs: str
) -> None:
    before = _stored(backend)
    found = tools.recall("diagnosis secret", k=10, user_id="alice")["memories"]
    assert [m["text"] for m in found] == ["alice likes green tea"]
    listed = tools.list_memories(user_id="alice")["memories"]
    assert [m["text"] for m in listed] == ["alice likes green tea"]
    assert tools.forget(bobs, user_id="alice") == {"forgotten": False}
    assert tools.forget_all("alice") == {"forgotten": 1}
    assert [row for row in _stored(backend) if row[0] == bobs] == [
        row for row in before if row[0] == bobs
    ]


def test_only_tenant_wide_calls_reach_every_user(wide: MemoryTools, bobs: str) -> None:
    assert wide.user_mode == "tenant_wide"
    assert {m["user_id"] for m in wide.list_memories()["memories"]} == {"alice", "bob"}
    assert {m["id"] for m in wide.recall("diagnosis", k=10)["memories"]} >= {bobs}
    # Erasing everything of a user still names the user.
    with pytest.raises(InvalidArguments):
        wide.forget_all()
    assert wide.forget(bobs) == {"forgotten": True}


def test_a_pinned_server_is_its_users_only(
    backend: LocalBackend, embedder: HashEmbedder, tools: MemoryTools, bobs: str
) -> None:
    alice = MemoryTools(backend, embedder, tenant=TENANT, user="alice")
    assert alice.user_mode == "pinned"
    kept = alice.remember("alice's new note")["id"]
    assert {m["text"] for m in alice.list_memories()["memories"]} == {
        "alice likes green tea",
        "alice's new note",
    }
    assert alice.list_memories(user_id="alice") == alice.list_memories()
    assert all(m["user_id"] == "alice" for m in alice.recall("secret", k=10)["memories"])
    assert alice.forget(bobs) == {"forgotten": False}
    before = _stored(backend)
    for run in (
        lambda: alice.remember("planted", user_id="bob"),
        lambda: alice.recall("secret", user_id="bob"),
        lambda: alice.list_memories(user_id="bob"),
        lambda: alice.forget(bobs, user_id="bob"),
        lambda: alice.forget_all("bob"),
    ):
        with pytest.raises(Forbidden) as caught:
            run()
        assert caught.value.details == {"field": "user_id"}
        assert "bob" not in caught.value.message
    assert _stored(backend) == before
    assert alice.forget(kept) == {"forgotten": True}
    assert alice.forget_all() == {"forgotten": 1}
    assert [m["id"] for m in tools.list_memories(user_id="bob")["memories"]] == [bobs]


def test_a_call_bound_to_a_user_is_that_users_only(
    tools: MemoryTools, wide: MemoryTools, backend: LocalBackend, bobs: str
) -> None:
    # A token's user pins the call, even on a server that allows tenant-wide calls.
    for server in (tools, wide):
        listed = server.list_memories(as_user="alice")["memories"]
        assert [m["text"] for m in listed] == ["alice likes green tea"]
        assert server.forget(bobs, as_user="alice") == {"forgotten": False}
        with pytest.raises(Forbidden):
            server.recall("secret", user_id="bob", as_user="alice")
        with pytest.raises(Forbidden):
            server.forget_all("bob", as_user="alice")
    assert [m["id"] for m in tools.list_memories(user_id="bob", as_user="bob")["memories"]] == [
        bobs
    ]


def test_a_pin_and_tenant_wide_calls_exclude_each_other(
    backend: LocalBackend, embedder: HashEmbedder
) -> None:
    with pytest.raises(ValueError, match="pinned"):
        MemoryTools(backend, embedder, tenant=TENANT, user="alice", allow_tenant_wide=True)
    with pytest.raises(InvalidArguments):
        MemoryTools(backend, embedder, tenant=TENANT, user="")
