"""Memory hygiene: over 100 consecutive real jobs the worker's RSS and device memory stay flat."""

from __future__ import annotations

import numpy as np

from cosyvoice_mac.engine import Engine, WorkerConfig
from cosyvoice_mac.request import Request, Voice
from tests.fakes.onnx_models import make_tiny_model_dir

JOBS = 100
WARM_UP_JOBS = 10  # allocator pools, lazy imports and caches settle during the first few jobs
TOLERANCE = 0.05
DEADLINE = 120.0


def test_memory_stays_flat_over_100_jobs(tmp_path, make_speech):
    model_dir = make_tiny_model_dir("cosyvoice3", tmp_path / "model")
    config = WorkerConfig(
        model_dir=str(model_dir),
        device="cpu",
        outputs_dir=str(tmp_path / "outputs"),
        cache_dir=str(tmp_path / "cache"),
        torch_threads=1,
    )
    voice = str(make_speech("A steady voice for a long run of jobs.", seconds=3.0))
    rss, device_bytes = [], []
    with Engine(config, max_queue=JOBS, start_timeout_s=DEADLINE) as engine:
        assert engine.start(timeout=DEADLINE), engine.status()
        job_ids = [engine.submit(Request.build("Hi.", Voice.recording(voice), seed=index)) for index in range(JOBS)]
        for job_id in job_ids:
            result = engine.result(job_id, timeout=DEADLINE)
            assert result.samples().size > 0
            memory = engine.status()["memory"]  # measured by the worker after this job's clean-up
            rss.append(memory["rss_bytes"])
            device_bytes.append(memory["device_allocated_bytes"])
        assert engine.status()["jobs_run"] == JOBS
    settled = np.array(rss[WARM_UP_JOBS:], dtype=float)
    baseline = settled[:10].mean()
    growth = settled.max() / baseline - 1.0
    assert growth <= TOLERANCE, f"RSS grew {growth:.1%} over {JOBS} jobs: {[round(r / 2**20) for r in rss]} MiB"
    assert settled[-10:].mean() / baseline - 1.0 <= TOLERANCE
    device = np.array(device_bytes[WARM_UP_JOBS:], dtype=float)
    assert device.max() <= device[:10].mean() * (1 + TOLERANCE) + 1, device_bytes


def test_after_the_worker_freezes_its_model_a_jobs_cycles_and_a_dropped_engines_are_still_collected():
    """The worker freezes what its load left (``keep_for_life``), so each job's clean-up walks only the job's
    objects; garbage a job makes is still collected then, and what the worker drops later (the MLX engine once
    PyTorch takes over) by ``collect_everything``."""
    import gc
    import weakref

    from cosyvoice_mac.engine.worker_memory import collect_everything, keep_for_life, release_memory

    class Node:
        pass

    def garbage_cycle() -> weakref.ref:
        node = Node()
        node.itself = node
        return weakref.ref(node)

    engine_part = Node()
    engine_part.itself = engine_part
    dropped = weakref.ref(engine_part)
    try:
        keep_for_life()
        assert gc.get_freeze_count() > 0
        made_by_a_job = garbage_cycle()
        release_memory()  # what the worker runs after every job
        assert made_by_a_job() is None
        del engine_part
        release_memory()
        assert dropped() is not None  # frozen: the per-job collection does not walk the loaded model
        collect_everything()
        assert dropped() is None and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
