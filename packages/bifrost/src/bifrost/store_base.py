"""What the planes' store protocols, their base classes and the client share: the
keyword arguments of the verbs, declared once as ``TypedDict`` s (PEP 692: a
signature takes them as ``**args: Unpack[...]``), and the batch write's way from
those arguments to the store's transaction (:class:`BatchWrites`).

Every optional keyword defaults to None. A method taking ``**args`` reads them
through :func:`keywords`, so a caller that is not type-checked still gets
Python's ``TypeError`` for a misspelt or missing keyword (a misspelt
``scope_all`` must not widen a read)."""

# No ``from __future__ import annotations``: the TypedDicts' keys are read at run time.

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypedDict, TypeVar

from bifrost.context import DispatchContext
from bifrost.writes import Scoped, WriteRequest, under_grant

__all__ = ["BatchWrites", "PageArgs", "ScopeArgs", "WriteArgs", "check_keywords", "keywords"]

_V = TypeVar("_V", bound=Scoped)


class ScopeArgs(TypedDict, total=False):
    """The scope filter of a read (``bifrost.scope.validate_scope``): every pair of
    ``scope_all``, and one of the ``scope_any`` dicts."""

    scope_all: dict[str, str] | None
    scope_any: list[dict[str, str]] | None


class PageArgs(TypedDict, total=False):
    """The page size of a paged read (``scan``, ``list``): at most ``limit`` items
    (None: the store's default page)."""

    limit: int | None


class _WriteKeys(TypedDict):
    idempotency_key: str
    ctx: DispatchContext


class WriteArgs(_WriteKeys, total=False):
    """The keywords of a store's batch write (``upsert_many``, ``put_many``): the
    idempotency key and the caller's context (required), the revisions the caller
    expects and the idempotency class."""

    expected_revisions: dict[str, int] | None
    idempotency_class: str | None


def keywords(verb: str, given: Mapping[str, Any], declared: Any) -> dict[str, Any]:
    """Every keyword of the TypedDict ``declared``, from ``given`` (an absent optional
    one as None). Raises the ``TypeError`` Python raises for an explicit signature
    when ``given`` holds a keyword ``declared`` does not, or lacks a required one."""
    optional: frozenset[str] = declared.__optional_keys__
    required: frozenset[str] = declared.__required_keys__
    check_keywords(verb, given, declared)
    for name in sorted(required - given.keys()):
        raise TypeError(f"{verb}() missing required keyword argument {name!r}")
    return {name: given.get(name) for name in (*required, *optional)}


def check_keywords(verb: str, given: Mapping[str, Any], declared: Any) -> None:
    """Raises the ``TypeError`` Python raises for an explicit signature when ``given``
    holds a keyword the TypedDict ``declared`` does not."""
    known: frozenset[str] = declared.__optional_keys__ | declared.__required_keys__
    for name in given:
        if name not in known:
            raise TypeError(f"{verb}() got an unexpected keyword argument {name!r}")


Validate = Callable[
    [list[dict[str, Any]], dict[str, int] | None, str, str | None], WriteRequest[_V]
]
"""A plane's batch validation: ``(records, expected_revisions, idempotency_key,
idempotency_class) -> WriteRequest`` (its limits bound already)."""


class BatchWrites:
    """The base of a plane's write class (``MemoryWrites``, ``AffectWrites``): the
    store decides the grant in its transaction, and :meth:`write_batch` runs a batch
    write from its arguments to the store's transaction."""

    write_grant_in_transaction: ClassVar[bool] = True
    """The store decides the grant itself (see :func:`bifrost.dispatch.guarded_write`)."""

    @staticmethod
    def write_batch(
        verb: str,
        validate: Validate[_V],
        perform: Callable[[WriteRequest[_V], str], dict[str, Any]],
        records: list[dict[str, Any]],
        args: WriteArgs,
    ) -> dict[str, Any]:
        """``records`` and ``args`` (read by :func:`keywords`) validated whole by the
        plane's ``validate``, put under the grant of ``args["ctx"]``
        (:func:`bifrost.writes.under_grant`), then ``perform`` ed as the context's
        actor: the store's part, inside its transaction. Raises what those raise."""
        kw = keywords(verb, args, WriteArgs)
        request = validate(
            records, kw["expected_revisions"], kw["idempotency_key"], kw["idempotency_class"]
        )
        return perform(under_grant(request, kw["ctx"].scope), kw["ctx"].actor)
