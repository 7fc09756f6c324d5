"""The UI process keeps no audio it does not need: over 200 streamed jobs its Python heap stays flat.

Streamed chunks reach listeners and are gone once they are drained; a finished job keeps only its
terminal event, whose result names the WAV instead of carrying the samples (issue 15: a per-job event
buffer nobody read kept every chunk, and every result's samples, for 500 finished jobs).
"""

from __future__ import annotations

import gc
import tracemalloc

from tests.fakes.fake_pipeline import fake_request, fake_worker_config, quick_engine, started

JOBS = 200
WARM_UP_JOBS = 20
SAMPLES_PER_JOB = 48_000  # 2 s at 24 kHz: 192 kB of float32 per job, streamed as one chunk
MAX_GROWTH_BYTES = 2 * 2**20  # 200 jobs of audio would be ~38 MB
DEADLINE = 60.0


def _run_jobs(engine, count: int, first_seed: int) -> None:
    for index in range(count):
        with engine.subscribe() as heard:
            job_id = engine.submit(fake_request("Hi.", stream=True, seed=first_seed + index))
            chunks = [event.audio for event in heard.of(job_id, DEADLINE) if event.kind == "progress"]
        assert chunks and chunks[0].size == SAMPLES_PER_JOB  # the stream itself still carries the audio
        result = engine.result(job_id, timeout=0)
        assert result.output_path and result.audio is None and result.duration_s == SAMPLES_PER_JOB / 24000


def test_ui_process_memory_stays_flat_over_200_streamed_jobs(tmp_path):
    config = fake_worker_config(tmp_path, segment_samples=SAMPLES_PER_JOB)
    with started(quick_engine(config, max_queue=4)) as engine:
        _run_jobs(engine, WARM_UP_JOBS, 0)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            _run_jobs(engine, JOBS - WARM_UP_JOBS, WARM_UP_JOBS)
            gc.collect()
            growth = tracemalloc.get_traced_memory()[0] - before
            top = tracemalloc.take_snapshot().statistics("lineno")[:5]
        finally:
            tracemalloc.stop()
        assert engine.status()["jobs_run"] >= JOBS
    assert growth < MAX_GROWTH_BYTES, f"the UI process kept {growth / 2**20:.1f} MiB over {JOBS} jobs: {top}"
