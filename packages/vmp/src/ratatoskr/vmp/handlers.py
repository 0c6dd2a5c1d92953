"""The VMP v0 route handlers over one store: a request's body in, the store called in
a worker thread, its answer's wire shape out. Errors are raised, never rendered here."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ratatoskr.vmp.bodies import SNAPSHOT_TYPE, json_object
from ratatoskr.vmp.errors import InvalidArgument
from ratatoskr.vmp.offload import in_thread, json_answer
from ratatoskr.vmp.store import VmpStore
from ratatoskr.vmp.upload import restore_upload

logger = logging.getLogger("ratatoskr.vmp")


@dataclass(frozen=True)
class VmpHandlers:
    """The handlers of one app: ``max_body_bytes`` caps JSON bodies, ``snapshot_cap``
    uploads, which are spooled in ``spool_dir`` (None: the system's temporary directory)."""

    store: VmpStore
    max_body_bytes: int
    snapshot_cap: int
    spool_dir: str | None

    async def upsert_vector(self, request: Request) -> Response:
        body = await json_object(
            request,
            self.max_body_bytes,
            required=("vector",),
            optional=("attach_to_document_node", "tags", "metadata"),
        )
        return await json_answer(
            lambda: self.store.upsert_vector(
                body["vector"],
                attach_to_document_node=body.get("attach_to_document_node"),
                tags=body.get("tags"),
                metadata=body.get("metadata"),
            ).to_json()
        )

    async def search_vector(self, request: Request) -> Response:
        body = await json_object(request, self.max_body_bytes, required=("query_vector", "k"))
        return await json_answer(
            lambda: {
                "results": [
                    hit.to_json()
                    for hit in self.store.search_vector(body["query_vector"], body["k"])
                ]
            }
        )

    async def meta_set(self, request: Request) -> Response:
        body = await json_object(request, self.max_body_bytes, required=("target_id", "metadata"))
        if not isinstance(body["target_id"], str):
            raise InvalidArgument("target_id must be a string")
        await in_thread(self.store.set_metadata, body["target_id"], body["metadata"])
        return JSONResponse({"success": True})

    async def meta_get(self, request: Request) -> Response:
        values = request.query_params.getlist("target_id")
        if len(values) != 1:
            raise InvalidArgument("exactly one target_id query parameter is required")
        target = values[0]
        return await json_answer(
            lambda: {"target_id": target, "metadata": self.store.get_metadata(target)}
        )

    async def snapshot_download(self, request: Request) -> Response:
        blob = await in_thread(self.store.snapshot)
        if len(blob) > self.snapshot_cap:
            # A backup this server would refuse to take back: say so while it is made.
            logger.warning(
                "vmp: a snapshot of %d bytes exceeds the upload cap of %d bytes;"
                " raise the cap to restore it here",
                len(blob),
                self.snapshot_cap,
            )
        return Response(blob, media_type=SNAPSHOT_TYPE)

    async def snapshot_upload(self, request: Request) -> Response:
        await restore_upload(request, self.store, self.snapshot_cap, self.spool_dir)
        return JSONResponse({"success": True})

    async def proof_state(self, request: Request) -> Response:
        return await json_answer(lambda: {"final_state_hash": self.store.state_hash()})

    async def health(self, request: Request) -> Response:
        return await json_answer(self.store.health)
