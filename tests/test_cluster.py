"""Long-form work on a real local Ray cluster: ``ray.init`` with two worker slots and no dashboard (one per
module), the preview voice (no CosyVoice weights), this process the driver. A batch's lines go to both
workers and come back as a local run makes them (same seed, same samples), and so do converted recordings; a
worker killed mid-batch gives its lines to the other and each line is saved once; a stopped batch resumes; a
worker without the model folder refuses the job before any line. The module is one xdist group, so one cluster
runs at a time."""

from __future__ import annotations

import json
import shutil
import threading
import time

import numpy as np
import pytest
import ray
import soundfile

from cosyvoice_mac import __version__
from cosyvoice_mac.cli.local import start_engine
from cosyvoice_mac.cli.main import build_parser, main
from cosyvoice_mac.cluster import SLOT_RESOURCE
from cosyvoice_mac.cluster.pool import WorkerPool
from cosyvoice_mac.cluster.speak import ClusterSpeak
from cosyvoice_mac.cluster.wire import ModelAsk
from cosyvoice_mac.engine.voice_library import VoiceLibrary
from cosyvoice_mac.frontend.prompt_audio import decode_prompt
from cosyvoice_mac.longform.convert_batch import plan_sources, run_convert_batch, sources_in_folder
from cosyvoice_mac.longform.runner import run_batch
from cosyvoice_mac.longform.speakers import EngineSpeak
from cosyvoice_mac.preview import PREVIEW, preview_available

pytestmark = pytest.mark.skipif(not preview_available(), reason="the preview voice's packages are not installed")

WORKERS = 2
SEED = 7
SENTENCE = "The quick brown fox jumps over the lazy dog."
LINES = ("One line.", "Another line here.", "A third one.", "Then the fourth.", "Five is next.", "And six.")
FILES = [f"{number:04d}.wav" for number in range(1, len(LINES) + 1)]
RECORDINGS = ("one.wav", "two.wav")


@pytest.fixture(scope="module")
def home(tmp_path_factory, make_speech):
    """A cache folder with the saved voice Anna, an empty models folder, and a local Ray cluster of two worker
    slots started with that environment (its workers see it), shut down after the module."""
    folder = tmp_path_factory.mktemp("cluster")
    (folder / "lines.txt").write_text("\n".join(LINES) + "\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COSYVOICE_CACHE_DIR", str(folder / "cache"))
        patch.setenv("COSYVOICE_MODELS_DIR", str(folder / "models"))  # every worker's: no model folder in it
        patch.delenv("RAY_ADDRESS", raising=False)
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        recording = make_speech(SENTENCE, seconds=5.0)
        content_hash = decode_prompt(str(recording)).content_hash
        VoiceLibrary().save("Anna", audio_hash=content_hash, model_id="not-yet", transcript=SENTENCE, audio=recording)
        ray.init(
            address="local",
            num_cpus=WORKERS,
            resources={SLOT_RESOURCE: WORKERS},
            include_dashboard=False,
            log_to_driver=False,
            logging_level="warning",
        )
        try:
            yield folder
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def recordings(home, make_speech):
    """A folder of recordings to convert."""
    folder = home / "recordings"
    folder.mkdir()
    for name, sentence in zip(RECORDINGS, ("Glue the sheet to the dark blue background.", "The birch canoe slid.")):
        shutil.copy(make_speech(sentence), folder / name)
    return folder


@pytest.fixture(scope="module")
def local(home, recordings):
    """The batch and the recordings made the ordinary way: the engine ``batch --local`` starts (the CLI's own
    ``start_engine`` with its parsed arguments) and its ``EngineSpeak``; one engine for both, to spare a start."""
    args = build_parser().parse_args(["batch", "lines.txt", "--out-dir", "x", "--local", "--model", PREVIEW])
    engine = start_engine(args, home / "outputs-local")
    try:
        speak = EngineSpeak(engine, default_voice="Anna", interface="cli", timeout_s=None)
        _batch(speak, home, "local")
        items, skipped = plan_sources(sources_in_folder(recordings))
        _convert(speak, items, skipped, home / "converted-local")
    finally:
        engine.close()
    return {"lines": home / "local", "recordings": home / "converted-local"}


@pytest.fixture(scope="module")
def pool(home):
    """Both workers with the preview voice loaded (the test's cluster stays up when the pool closes)."""
    _wait_for_free_slots()
    workers = WorkerPool.open("local:2", ModelAsk(PREVIEW, __version__))
    yield workers
    workers.close()


def _wait_for_free_slots(seconds: float = 30.0) -> None:
    """Until both slots are free (a killed actor gives its slot back a moment later)."""
    deadline = time.monotonic() + seconds
    while ray.available_resources().get(SLOT_RESOURCE, 0) < WORKERS:
        assert time.monotonic() < deadline, f"the cluster's slots stayed taken: {ray.available_resources()}"
        time.sleep(0.1)


def _batch(speak, home, folder, **options):
    """``run_batch`` of the lines with ``speak``, as the ``batch`` command runs it (here, or on the cluster)."""
    return run_batch(
        (home / "lines.txt").read_bytes(),
        "txt",
        home / folder,
        speak,
        voice="Anna",
        settings={"model": PREVIEW, "glossary": []},
        seed=SEED,
        **options,
    )


def _convert(speak, items, skipped, folder):
    """``run_convert_batch`` of the recordings with ``speak``, as ``batch FOLDER`` runs it."""
    return run_convert_batch(
        items,
        skipped,
        folder,
        speak.convert,
        voice="Anna",
        settings={"model": PREVIEW},
        prepare=speak.prepare,
        ahead=getattr(speak, "convert_ahead", None),
    )


def _assert_same_audio(folder, local) -> None:
    assert sorted(path.name for path in folder.glob("*.wav")) == FILES
    for name in FILES:
        made, _ = soundfile.read(folder / name, dtype="int16")
        expected, _ = soundfile.read(local / name, dtype="int16")
        assert np.array_equal(made, expected), f"{name} differs from the local run's"


def _sidecars(folder) -> list[dict]:
    return [json.loads((folder / name).with_suffix(".json").read_text()) for name in FILES]


def test_a_worker_without_the_model_folder_refuses_the_job_before_any_line(home, capsys):
    _wait_for_free_slots()
    code = main(
        ["batch", str(home / "lines.txt"), "--voice", "Anna", "--out-dir", str(home / "refused")]
        + ["--cluster", "local:2", "--model", "Fun-CosyVoice3-0.5B", "--outputs-dir", str(home / "outputs-refused")]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no line was sent" in err and err.count("has no model folder 'Fun-CosyVoice3-0.5B'") == WORKERS, err
    assert not (home / "refused").exists() and not (home / "outputs-refused").exists()
    assert ray.is_initialized()  # the command joined the test's cluster: it leaves it up
    _wait_for_free_slots()  # and its workers are gone


def test_a_batch_on_two_workers_is_the_local_runs_and_each_sidecar_names_its_machine(pool, home, local):
    speak = ClusterSpeak(pool, home / "outputs-cluster", default_voice="Anna")
    result = _batch(speak, home, "on-cluster")
    assert result.report == [{"made": len(LINES), "skipped": 0}] and not result.stopped
    _assert_same_audio(home / "on-cluster", local["lines"])
    sidecars = _sidecars(home / "on-cluster")
    assert {sidecar["cluster_worker"] for sidecar in sidecars} == {worker.name for worker in pool.workers}
    assert {sidecar["machine"] for sidecar in sidecars} == {pool.workers[0].facts.host}
    saved = sorted((home / "outputs-cluster").glob("*.json"))  # each line once in this machine's outputs/
    assert len(saved) == len(LINES) and all(json.loads(path.read_text())["machine"] for path in saved)
    assert set(json.loads((home / "on-cluster" / "batch.json").read_text())["files"]) == set(FILES)
    assert speak.dispatch.lost == {}


def test_a_stopped_batch_resumes_with_the_lines_it_lacks(pool, home, local):
    speak, stop = ClusterSpeak(pool, home / "outputs-resumed", default_voice="Anna"), threading.Event()

    def stop_after_two(progress):
        if progress.done == 2:
            stop.set()
            speak.stop()  # what Ctrl-C calls: every worker cancels this job's lines

    first = _batch(speak, home, "resumed", on_progress=stop_after_two, should_stop=stop.is_set)
    assert first.stopped and first.report == [{"made": 2, "skipped": 0}]
    second = _batch(ClusterSpeak(pool, home / "outputs-resumed", default_voice="Anna"), home, "resumed")
    assert second.report == [{"made": len(LINES) - 2, "skipped": 2}] and not second.stopped
    _assert_same_audio(home / "resumed", local["lines"])
    assert len(list((home / "outputs-resumed").glob("*.wav"))) == len(LINES)  # the cancelled lines were not saved


def test_recordings_converted_on_the_workers_are_the_local_runs(pool, home, recordings, local):
    speak = ClusterSpeak(pool, home / "outputs-converted", default_voice="Anna")
    items, skipped = plan_sources(sources_in_folder(recordings))
    result = _convert(speak, items, skipped, home / "converted")
    assert [entry["status"] for entry in result.report] == ["made"] * len(RECORDINGS)
    for name in RECORDINGS:
        made, _ = soundfile.read(home / "converted" / name, dtype="int16")
        expected, _ = soundfile.read(local["recordings"] / name, dtype="int16")
        assert np.array_equal(made, expected), f"{name} differs from the local run's"
        sidecar = json.loads((home / "converted" / name).with_suffix(".json").read_text())
        assert sidecar["source"] == name and sidecar["mode"] == "voice_conversion" and sidecar["machine"]


def test_a_worker_killed_mid_batch_leaves_its_lines_to_the_other_each_saved_once(pool, home, local):
    speak, killed = ClusterSpeak(pool, home / "outputs-killed", default_voice="Anna"), []

    def kill_one_speaking(progress):
        if killed:
            return
        speaking = {}  # worker -> its groups still being spoken, or waiting their turn there
        for ref, (worker, _, _) in list(speak.dispatch.in_flight.items()):
            if not ray.wait([ref], timeout=0)[0]:
                speaking[worker.name] = speaking.get(worker.name, 0) + 1
        victim = next(worker for worker in pool.workers if worker.name == max(speaking, key=speaking.get))
        ray.kill(victim.handle, no_restart=True)
        killed.append(victim.name)

    result = _batch(speak, home, "killed", on_progress=kill_one_speaking)
    assert result.report == [{"made": len(LINES), "skipped": 0}] and not result.stopped
    _assert_same_audio(home / "killed", local["lines"])
    lost = speak.dispatch.lost
    assert list(lost) == killed and lost[killed[0]].lines_resent >= 1
    survivor = next(worker.name for worker in pool.workers if worker.name != killed[0])
    assert speak.dispatch.made[survivor] >= lost[killed[0]].lines_resent
    assert sum(speak.dispatch.made.values()) == len(LINES)  # no line made twice
    assert len(list((home / "outputs-killed").glob("*.wav"))) == len(LINES)  # nor saved twice
    assert set(json.loads((home / "killed" / "batch.json").read_text())["files"]) == set(FILES)
    assert any(said.startswith(f"lost {killed[0]}") for said in speak.summary())


# -- without a cluster: where a job runs, and how its lines are cut ------------------------------------------


def _args(**given):
    from argparse import Namespace

    return Namespace(**{"cluster": None, "server": None, "local": False, **given})


def test_cluster_flag_then_ray_address_unless_local_or_server_says_where(monkeypatch):
    from cosyvoice_mac.cli.common import CommandFailed
    from cosyvoice_mac.cli.longform_cluster import cluster_address

    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    assert cluster_address(_args()) == "head:6379"
    assert cluster_address(_args(cluster=" local:2 ")) == "local:2"
    assert cluster_address(_args(local=True)) is None and cluster_address(_args(server="http://app:7860")) is None
    with pytest.raises(CommandFailed, match="leave out --server"):
        cluster_address(_args(cluster="head:6379", server="http://app:7860"))
    monkeypatch.delenv("RAY_ADDRESS")
    assert cluster_address(_args()) is None


@pytest.mark.parametrize("address", ["local:0", "local:two", "local:65"])
def test_a_local_cluster_takes_one_to_64_workers(address):
    from cosyvoice_mac.cluster import ClusterError
    from cosyvoice_mac.cluster.pool import local_workers

    with pytest.raises(ClusterError, match="from 1 to 64"):
        local_workers(address)
    assert local_workers("local:3") == 3 and local_workers("head:6379") is None


def test_lines_are_cut_into_a_few_groups_per_worker_and_at_most_a_batch():
    from cosyvoice_mac.cluster.dispatch import MAX_GROUP_LINES, group_size

    assert group_size(6, 2) == 1 and group_size(40, 2) == 5 and group_size(40, 1) == MAX_GROUP_LINES
    assert group_size(1000, 16) == MAX_GROUP_LINES and group_size(1, 16) == 1
