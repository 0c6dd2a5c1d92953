"""The five memory tools, as plain methods: text in, the memory plane's verbs out.

Each call's grant is the server's tenant plus the axes the call names (``user_id`` →
``end_user``, ``agent_id`` → ``agent_self``); every verb runs under exactly that grant,
so a call never sees, changes or erases a record outside it, and a record outside it is
answered as if absent. Which user a call may name is the server's user mode: by default
every call names one (a call without ``user_id`` is refused before anything is read or
written); a server pinned to one user (``user=``), or a call the transport bound to one
(``as_user``, an HTTP token's user), is that user's and refuses any other; only a server
made with ``allow_tenant_wide`` lets a call omit it and reach the whole tenant. Texts go
through the embedder (``embed_documents`` for what is stored, ``embed_query`` for what
is searched with); a record holds the text as ``content``, the caller's metadata
verbatim under ``metadata``, and its scope.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from typing_extensions import TypedDict

from bifrost.errors import Forbidden, InvalidArguments
from bifrost.scope import validate_record_scope
from ratatoskr.embed import Embedder, check_dimension
from ratatoskr.mcp.backend import MemoryBackend

__all__ = [
    "DEFAULT_PAGE",
    "MAX_TEXT_CHARS",
    "ForgetAllResult",
    "ForgetResult",
    "Memory",
    "MemoryPage",
    "MemoryTools",
    "RecallResult",
    "RememberResult",
    "UserMode",
]

# A memory is a sentence or a note, not a document: longer texts are refused before the
# embedder sees them (the bundled model reads its first 512 tokens only anyway).
MAX_TEXT_CHARS = 32_000
DEFAULT_PAGE = 20
_NO_EMBEDDING = {"embedding": False}
UserMode = Literal["required", "pinned", "tenant_wide"]


class Memory(TypedDict):
    """One memory as the tools return it (``score`` only from ``recall``)."""

    id: str
    text: str
    metadata: dict[str, Any]
    user_id: str | None
    agent_id: str | None


class ScoredMemory(Memory):
    score: float


class RememberResult(TypedDict):
    id: str


class RecallResult(TypedDict):
    memories: list[ScoredMemory]


class MemoryPage(TypedDict):
    memories: list[Memory]
    next_cursor: str | None


class ForgetResult(TypedDict):
    forgotten: bool


class ForgetAllResult(TypedDict):
    forgotten: int


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArguments(f"{name} must be a non-empty string", {"field": name})
    if len(value) > MAX_TEXT_CHARS:
        raise InvalidArguments(
            f"{name} is longer than {MAX_TEXT_CHARS} characters", {"field": name}
        )
    return value


def _memory(record: dict[str, Any]) -> Memory:
    scope = record.get("scope") or {}
    metadata = record.get("metadata")
    return {
        "id": str(record["id"]),
        "text": str(record.get("content", "")),
        "metadata": metadata if isinstance(metadata, dict) else {},
        "user_id": scope.get("end_user"),
        "agent_id": scope.get("agent_self"),
    }


def _user_value(value: object, name: str) -> str:
    """A user id (a scope value: a non-empty string), else ``InvalidArguments``."""
    if not isinstance(value, str) or not value:
        raise InvalidArguments(f"{name} must be a non-empty string", {"field": name})
    return value


def metadata_filter(filter_: dict[str, Any] | None) -> dict[str, Any] | None:
    """A tool's ``filter`` on the caller's metadata, as the plane's ``metadata_filter``:
    each field is a path under ``metadata`` (``{"kind": "note"}`` →
    ``{"metadata.kind": "note"}``); conditions pass through unchanged."""
    if filter_ is None:
        return None
    if not isinstance(filter_, dict):
        raise InvalidArguments("filter must be an object of metadata fields", {"field": "filter"})
    return {f"metadata.{field}": condition for field, condition in filter_.items()}


class MemoryTools:
    """``remember``, ``recall``, ``list_memories``, ``forget``, ``forget_all`` over a backend
    for one tenant. Raises ``EmbedderMismatch`` when made with an embedder of another
    dimension than the store's. Every method raises ``InvalidArguments`` (nothing read or
    written) for bad input, a missing ``user_id`` included, ``Forbidden`` for a ``user_id``
    other than the one the call is bound to, and passes on the backend's and the
    embedder's typed errors.

    ``user`` pins every call to that user; ``allow_tenant_wide`` lets a call without
    ``user_id`` reach the whole tenant (every user's memories and the shared ones). The
    two exclude each other (``ValueError``)."""

    def __init__(
        self,
        backend: MemoryBackend,
        embedder: Embedder,
        *,
        tenant: str,
        actor: str = "mcp",
        user: str | None = None,
        allow_tenant_wide: bool = False,
    ) -> None:
        if user is not None and allow_tenant_wide:
            raise ValueError("a server pinned to one user cannot also allow tenant-wide calls")
        check_dimension(backend.embedding_dim, embedder)
        self._backend = backend
        self._embedder = embedder
        self._tenant = validate_record_scope({"tenant": tenant}, "tenant")["tenant"]
        self._user = None if user is None else _user_value(user, "user")
        self._tenant_wide = allow_tenant_wide
        self.actor = actor

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def user_mode(self) -> UserMode:
        """``required`` (every call names its user), ``pinned`` (every call is the
        server's user) or ``tenant_wide`` (a call may omit the user)."""
        if self._user is not None:
            return "pinned"
        return "tenant_wide" if self._tenant_wide else "required"

    def _call_user(self, user_id: str | None, as_user: str | None) -> str | None:
        """The user a call is inside: the one it is bound to (``as_user``, else the
        server's pin), which ``user_id`` may repeat but not change; else ``user_id``,
        required unless the server allows tenant-wide calls."""
        if user_id is not None:
            user_id = _user_value(user_id, "user_id")
        bound = as_user if as_user is not None else self._user
        if bound is not None:
            if user_id is not None and user_id != bound:
                raise Forbidden(
                    "this call is bound to one user; user_id names another", {"field": "user_id"}
                )
            return bound
        if user_id is None and not self._tenant_wide:
            raise InvalidArguments(
                "user_id is required: name the user whose memories this call reads or writes",
                {"field": "user_id"},
            )
        return user_id

    def _grant(
        self, user_id: str | None, agent_id: str | None, as_user: str | None
    ) -> dict[str, str]:
        grant = {"tenant": self._tenant}
        user = self._call_user(user_id, as_user)
        if user is not None:
            grant["end_user"] = user
        if agent_id is not None:
            grant["agent_self"] = agent_id
        return validate_record_scope(grant, "scope")

    def remember(
        self,
        text: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        as_user: str | None = None,
    ) -> RememberResult:
        """Store ``text`` as a new memory in the call's scope; its id (a fresh uuid4)."""
        text = _text(text, "text")
        scope = self._grant(user_id, agent_id, as_user)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidArguments("metadata must be an object", {"field": "metadata"})
        memory_id = str(uuid.uuid4())
        record: dict[str, Any] = {
            "id": memory_id,
            "content": text,
            "embedding": self._embedder.embed_documents([text])[0],
            "scope": scope,
        }
        if metadata is not None:
            record["metadata"] = metadata
        self._backend.granted(scope).call(
            "upsert_many",
            {"records": [record], "expected_revisions": {memory_id: 0}},
            idempotency_key=memory_id,
        )
        return {"id": memory_id}

    def recall(
        self,
        query: str,
        k: int = 5,
        user_id: str | None = None,
        agent_id: str | None = None,
        filter: dict[str, Any] | None = None,
        *,
        as_user: str | None = None,
    ) -> RecallResult:
        """The ``k`` memories of the call's scope closest to ``query``, best first."""
        query = _text(query, "query")
        grant = self._grant(user_id, agent_id, as_user)
        args: dict[str, Any] = {
            "vector": self._embedder.embed_query(query),
            "top_k": k,
            "include": _NO_EMBEDDING,
        }
        found = metadata_filter(filter)
        if found:
            args["metadata_filter"] = found
        rows = self._backend.granted(grant).call("search", args)
        return {
            "memories": [{**_memory(row["chunk"]), "score": float(row["score"])} for row in rows]
        }

    def list_memories(
        self,
        user_id: str | None = None,
        agent_id: str | None = None,
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE,
        *,
        as_user: str | None = None,
    ) -> MemoryPage:
        """One page of the call's scope in id order; ``next_cursor`` (None: the last page)
        is passed back as ``cursor`` for the next."""
        grant = self._grant(user_id, agent_id, as_user)
        args: dict[str, Any] = {"limit": limit, "include": _NO_EMBEDDING}
        if cursor is not None:
            args["after_id"] = cursor
        page = self._backend.granted(grant).call("scan", args)
        return {
            "memories": [_memory(item) for item in page["items"]],
            "next_cursor": page.get("next_after_id"),
        }

    def forget(
        self,
        memory_id: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        *,
        as_user: str | None = None,
    ) -> ForgetResult:
        """Erase the memory ``memory_id`` if the call's scope holds it; whether it did (an
        absent id and one outside the scope answer alike: ``False``)."""
        memory_id = _text(memory_id, "memory_id")
        grant = self._grant(user_id, agent_id, as_user)
        deleted = self._backend.granted(grant).call("delete_many", {"ids": [memory_id]})
        return {"forgotten": int(deleted["deleted"]) > 0}

    def forget_all(
        self, user_id: str | None = None, *, as_user: str | None = None
    ) -> ForgetAllResult:
        """Erase every memory of the call's user in this tenant (every agent's); how many.
        Always one user's, even where other calls may reach the whole tenant."""
        user = self._call_user(user_id, as_user)
        if user is None:
            raise InvalidArguments("forget_all needs a user_id", {"field": "user_id"})
        return {"forgotten": self._backend.forget(self._grant(user, None, as_user))}
