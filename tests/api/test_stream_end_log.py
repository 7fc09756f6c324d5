"""An HTTP error raised inside a stream already under way (Gradio's message stream of a session it no longer holds)
is logged as one line, not as an unexpected error with a traceback; other failures keep their traceback."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException

from cosyvoice_mac.api.errors import install_error_handlers


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app, "/v1")

    @app.get("/stream-gone")
    def stream_gone():
        try:
            raise HTTPException(404)
        except HTTPException as error:
            raise RuntimeError("the stream's task group ended") from error

    @app.get("/broken")
    def broken():
        raise RuntimeError("a real bug")

    return app


def test_an_http_error_inside_a_stream_is_one_line_and_a_real_failure_keeps_its_traceback(caplog):
    client = TestClient(_app(), raise_server_exceptions=False)
    with caplog.at_level(logging.WARNING):
        gone = client.get("/stream-gone")
    assert gone.status_code == 404
    records = [record for record in caplog.records if "/stream-gone" in record.getMessage()]
    assert records and all(record.exc_info is None for record in records)
    assert all(record.levelno == logging.WARNING for record in records)

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        broken = client.get("/broken")
    assert broken.status_code == 500
    assert any(record.exc_info is not None for record in caplog.records)
