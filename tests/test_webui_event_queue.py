"""Which of the page's events go through Gradio's queue.

Gradio's page client (6.31) can lose a queued event that joins in the moment the session's message stream
closes after the last queued event: the event is posted but its answer never read, and its button spins
forever (seen as a Generate pressed right after typing, when each keystroke's check was queued). So events
the page fires on its own stay off the queue, and the queue holds only what a person starts."""

from __future__ import annotations

import pytest

from cosyvoice_mac.engine.host import HostConfig, ModelHost
from cosyvoice_mac.webui.page import build_app

# Triggers that fire without a press: a control changed (by the user or by another event's answer), the
# page loading, a timer, the follow-ups of another event, and focus leaving a field (most often because
# the user pressed a button: its event would join just as the field's closed).
SELF_FIRED = {"change", "load", "tick", "then", "success", "failure", "blur", "focus"}


@pytest.fixture(scope="module")
def page_config(tmp_path_factory):
    root = tmp_path_factory.mktemp("event-queue")
    host = ModelHost(
        HostConfig(models_dir=root / "none", outputs_dir=root / "outputs", cache_dir=root / "cache", preview=True)
    )
    try:
        page = build_app(host=host)
        yield page, page.get_config_file()
    finally:
        host.close()


def _events(page, config):
    for dependency in config["dependencies"]:
        triggers = {trigger for _, trigger in dependency["targets"]}
        fn = page.fns[dependency["id"]].fn
        yield triggers, getattr(fn, "__name__", "js"), dependency.get("queue") is not False


def test_no_event_the_page_fires_on_its_own_is_queued(page_config):
    queued_self_fired = sorted(
        f"{name} on {'/'.join(sorted(triggers))}"
        for triggers, name, queued in _events(*page_config)
        if queued and triggers & SELF_FIRED
    )
    assert queued_self_fired == []


def test_what_a_person_starts_stays_on_the_queue(page_config):
    queued = {name for triggers, name, queued in _events(*page_config) if queued}
    # Generating streams its progress and the long jobs hold their place in line: they need the queue.
    assert {"generate", "transcribe", "dialogue", "convert"} <= queued
    # Each keystroke's checks answer at once beside the field, off the queue.
    unqueued = {name for _, name, queued in _events(*page_config) if not queued}
    assert {"blockers", "counter", "status_panel", "history_show", "glossary_rows", "check_transcript"} <= unqueued
