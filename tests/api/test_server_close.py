"""Closing the server (Ctrl-C) with a tab open: the tab's stream ends at once and nothing is logged as an error
(issue 50 item 12: uvicorn used to wait 5 s for the heartbeat, then cancel it with a traceback)."""

from __future__ import annotations

import logging
import threading
import time

import httpx

from cosyvoice_mac.api.server import RunningServer


class _Errors(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def test_closing_the_server_ends_an_open_tab_s_stream_at_once_without_a_traceback():
    import gradio as gr
    from fastapi import FastAPI

    with gr.Blocks() as page:
        gr.Markdown("A page with a tab open.")
    page.queue()
    server = RunningServer(gr.mount_gradio_app(FastAPI(), page, path=""), "127.0.0.1", 0)
    streaming, ended = threading.Event(), threading.Event()

    def open_tab() -> None:  # what a browser tab keeps open: its heartbeat
        try:
            with httpx.stream("GET", f"{server.url}gradio_api/heartbeat/a-tab", timeout=30) as answer:
                for _ in answer.iter_lines():
                    streaming.set()
        except httpx.HTTPError:
            pass
        ended.set()

    errors = _Errors()
    logging.getLogger("uvicorn.error").addHandler(errors)
    try:
        threading.Thread(target=open_tab, daemon=True).start()
        assert streaming.wait(30)
        started = time.monotonic()
        server.close()
        assert time.monotonic() - started < 3  # not uvicorn's 5 s wait for the stream
    finally:
        logging.getLogger("uvicorn.error").removeHandler(errors)
    assert ended.wait(5) and errors.seen == []
