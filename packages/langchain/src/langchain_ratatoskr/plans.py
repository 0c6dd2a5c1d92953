"""Each store operation written once, for both its blocking and its awaited form.

An operation is a *plan*: a generator that yields the I/O it needs (a :class:`Call`
to the plane, or an :class:`Embed` of documents), receives each answer back and
returns the operation's result. It does no I/O itself. :func:`run` answers its
steps with blocking calls, :func:`arun` with awaited ones; what a step raises
propagates out of the driver unchanged, exactly as a direct call would.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from langchain_core.embeddings import Embeddings

from langchain_ratatoskr.calls import MemoryCalls

__all__ = ["Call", "Embed", "Plan", "arun", "run"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """One verb on the memory plane; the plan receives its result."""

    verb: str
    args: dict[str, Any]

    def send(self, calls: MemoryCalls, embedding: Embeddings) -> Any:
        return calls.call(self.verb, self.args)

    async def asend(self, calls: MemoryCalls, embedding: Embeddings) -> Any:
        return await calls.acall(self.verb, self.args)


@dataclass(frozen=True, slots=True)
class Embed:
    """The embedder's vectors for ``texts``; the plan receives them."""

    texts: list[str]

    def send(self, calls: MemoryCalls, embedding: Embeddings) -> list[list[float]]:
        return embedding.embed_documents(self.texts)

    async def asend(self, calls: MemoryCalls, embedding: Embeddings) -> list[list[float]]:
        return await embedding.aembed_documents(self.texts)


Step: TypeAlias = Call | Embed
Plan: TypeAlias = Generator[Step, Any, T]


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    value: T


def _advance(plan: Plan[T], answer: Any) -> Step | _Done[T]:
    """The plan's next step given ``answer`` to its last one, or its result."""
    try:
        return plan.send(answer)
    except StopIteration as done:
        return _Done(done.value)


def run(plan: Plan[T], calls: MemoryCalls, embedding: Embeddings) -> T:
    """Carry out ``plan`` with blocking calls; its result."""
    step = _advance(plan, None)
    while not isinstance(step, _Done):
        step = _advance(plan, step.send(calls, embedding))
    return step.value


async def arun(plan: Plan[T], calls: MemoryCalls, embedding: Embeddings) -> T:
    """Carry out ``plan`` with awaited calls; its result."""
    step = _advance(plan, None)
    while not isinstance(step, _Done):
        step = _advance(plan, await step.asend(calls, embedding))
    return step.value
