"""The store and the client share close-on-exit and the upsert keywords."""

from __future__ import annotations

from typing import Any

import pytest

from ratatoskr.vmp import build_vmp_app, open_vmp_store
from ratatoskr.vmp.client import VmpClient
from ratatoskr.vmp.errors import InternalError
from ratatoskr.vmp.interface import ClosesOnExit, upsert_fields

from .conftest import API_KEY, DIM, AppTransport, vec


def test_store_and_client_close_on_exit() -> None:
    with open_vmp_store(":memory:", dim=DIM) as store:
        assert isinstance(store, ClosesOnExit)
        transport = AppTransport(build_vmp_app(store, api_key=API_KEY))
        with VmpClient("http://vmp.test/", API_KEY, transport=transport) as client:
            assert isinstance(client, ClosesOnExit)
            client.upsert_vector(vec(1), tags=["t"], metadata={"n": 1})
        with pytest.raises(RuntimeError):  # httpx refuses a closed client
            client.health()
        assert store.record_count() == 1
    with pytest.raises(InternalError):
        store.record_count()


def test_upsert_keywords_are_the_same_on_both() -> None:
    with open_vmp_store(":memory:", dim=DIM) as store:
        transport = AppTransport(build_vmp_app(store, api_key=API_KEY))
        with VmpClient("http://vmp.test/", API_KEY, transport=transport) as client:
            client.upsert_vector(vec(1))
            via_client = client.upsert_vector(
                vec(2), attach_to_document_node=0, tags=["a"], metadata={"k": 1}
            )
            direct = store.upsert_vector(vec(3), attach_to_document_node=0, tags=None)
            assert via_client["document_node_id"] == direct.document_node_id == 0
            assert store.get_metadata("rec:1") == {"k": 1}
            bogus: dict[str, Any] = {"attach_to_document": 0}
            for upsert in (store.upsert_vector, client.upsert_vector):
                with pytest.raises(TypeError, match="'attach_to_document'"):
                    upsert(vec(4), **bogus)
            assert store.record_count() == 3


def test_upsert_fields_default_to_none() -> None:
    assert upsert_fields({}) == (None, None, None)
    assert upsert_fields({"tags": ["x"], "metadata": 0}) == (None, ["x"], 0)
