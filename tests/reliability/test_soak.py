"""A short soak of alternating Gradio-API and ``/v1`` jobs with the preview voice (``tests/reliability/soak.py``;
``bench/soak_memory.py`` runs the 150-job one): the memory of the page's process and of the worker, as the slope of
a line through every sample, stays within a bound per 100 jobs."""

from __future__ import annotations

from tests.reliability.soak import soak

JOBS, EVERY, WARM_UP = 48, 6, 8
WORKER_BOUND_MB_PER_100_JOBS = 6.0  # before its fix: a +40 MB step (Piper's arena), 18 MB per 100 over 150 jobs
# The page's process: 9.7 MB per 100 of these jobs before its fix (every REST call's Gradio session kept, ~250 KB
# each: Gradio's emptied set of event ids made each look busy to api/sessions.py), flat after it.
PAGE_BOUND_MB_PER_100_JOBS = 5.0


def test_a_soak_of_alternating_gradio_and_v1_jobs_keeps_both_processes_flat(app):
    figures = soak(app, JOBS, EVERY, WARM_UP)
    assert figures["same_worker"], figures
    assert figures["ui_mb_per_100_jobs"] <= PAGE_BOUND_MB_PER_100_JOBS, figures
    assert figures["worker_mb_per_100_jobs"] <= WORKER_BOUND_MB_PER_100_JOBS, figures
