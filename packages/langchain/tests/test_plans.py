"""The plan drivers without a server: each step's answer goes back into the plan, both
drivers give the same result for the same plan, and what a step raises leaves the
driver as it is (the plan is not resumed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_ratatoskr.plans import Call, Embed, Plan, arun, run

from bifrost.errors import InvalidArguments


class Recorded:
    """A memory plane that answers each verb with its name and arguments, and records
    which of its methods (blocking or awaited) answered; ``fail`` raises instead."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.seen: list[tuple[str, str]] = []

    def call(self, verb: str, args: dict[str, Any]) -> Any:
        return self._answer("call", verb, args)

    async def acall(self, verb: str, args: dict[str, Any]) -> Any:
        return self._answer("acall", verb, args)

    def _answer(self, how: str, verb: str, args: dict[str, Any]) -> Any:
        self.seen.append((how, verb))
        if verb == self.fail:
            raise InvalidArguments("refused", {"field": "x"})
        return {"verb": verb, **args}

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class Lengths(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(len(t))] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [float(len(text))]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[-float(len(t))] for t in texts]


def plan(after: list[str]) -> Plan[list[Any]]:
    vectors = yield Embed(["ab", "abc"])
    first = yield Call("health", {})
    after.append("health answered")
    second = yield Call("scan", {"n": 1})
    after.append("scan answered")
    return [vectors, first, second]


def test_run_answers_each_step_with_blocking_calls() -> None:
    calls, after = Recorded(), list[str]()
    result = run(plan(after), calls, Lengths())
    assert result == [[[2.0], [3.0]], {"verb": "health"}, {"verb": "scan", "n": 1}]
    assert calls.seen == [("call", "health"), ("call", "scan")]
    assert after == ["health answered", "scan answered"]


def test_arun_answers_each_step_with_awaited_calls() -> None:
    calls, after = Recorded(), list[str]()
    result = asyncio.run(arun(plan(after), calls, Lengths()))
    # aembed_documents answers, not embed_documents: the negated lengths.
    assert result == [[[-2.0], [-3.0]], {"verb": "health"}, {"verb": "scan", "n": 1}]
    assert calls.seen == [("acall", "health"), ("acall", "scan")]


def blocking(p: Plan[Any], calls: Recorded) -> Any:
    return run(p, calls, Lengths())


def awaited(p: Plan[Any], calls: Recorded) -> Any:
    return asyncio.run(arun(p, calls, Lengths()))


@pytest.mark.parametrize("drive", [blocking, awaited])
def test_a_step_that_raises_ends_the_run_with_its_error(drive: Any) -> None:
    calls, after = Recorded(fail="health"), list[str]()
    with pytest.raises(InvalidArguments, match="refused"):
        drive(plan(after), calls)
    assert after == []  # nothing after the failed step ran
    assert [verb for _, verb in calls.seen] == ["health"]


def test_a_plan_without_steps_returns_at_once() -> None:
    def nothing() -> Plan[int]:
        yield from ()  # a generator that returns before any step
        return 7

    assert run(nothing(), Recorded(), Lengths()) == 7
    assert asyncio.run(arun(nothing(), Recorded(), Lengths())) == 7
