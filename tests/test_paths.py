"""One rule per folder (paths.py), reaching every interface; the one atomic write; the one command."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cosyvoice_mac import download, load, paths
from cosyvoice_mac.app import parse_args
from cosyvoice_mac.cli import local
from cosyvoice_mac.cli.main import build_parser
from cosyvoice_mac.engine.host import HostConfig, ModelHost

ROOT = Path(__file__).resolve().parents[1]


def _model_folder(models: Path, name: str, version: str = "cosyvoice3") -> Path:
    folder = models / name
    folder.mkdir(parents=True)
    (folder / f"{version}.yaml").write_text("{}\n")
    return folder


@pytest.fixture
def models_env(tmp_path, monkeypatch):
    models = tmp_path / "my models"
    monkeypatch.setenv(paths.MODELS_VARIABLE, str(models))
    return models


def test_the_models_variable_is_read_when_asked_not_at_import(models_env, monkeypatch):
    assert paths.default_models_dir() == models_env
    monkeypatch.delenv(paths.MODELS_VARIABLE)
    assert paths.default_models_dir() == ROOT / "models"  # a checkout keeps its models/ beside run.sh


def test_an_installed_copy_keeps_its_folders_in_the_user_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(paths.MODELS_VARIABLE, raising=False)
    monkeypatch.delenv(paths.OUTPUTS_VARIABLE, raising=False)
    monkeypatch.setattr(paths, "CHECKOUT", tmp_path / "site-packages")  # no pyproject.toml beside the package
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(sys, "platform", "linux")
    assert paths.default_models_dir() == tmp_path / "data" / "cosyvoice-mac" / "models"
    assert paths.default_outputs_dir() == tmp_path / "data" / "cosyvoice-mac" / "outputs"


def test_the_page_takes_the_models_and_outputs_variables(models_env, tmp_path, monkeypatch):
    monkeypatch.setenv(paths.OUTPUTS_VARIABLE, str(tmp_path / "made"))
    args = parse_args([])
    assert args.models_dir == models_env and args.outputs_dir == tmp_path / "made"
    assert parse_args(["--models-dir", str(tmp_path / "flag")]).models_dir == tmp_path / "flag"  # a flag wins


def test_the_cli_and_the_library_pick_the_model_from_the_variable(models_env, tmp_path):
    _model_folder(models_env, "CosyVoice2-0.5B", "cosyvoice2")
    newest = _model_folder(models_env, "Fun-CosyVoice3-0.5B")
    args = build_parser().parse_args(["synth", "--voice", "v", "--text", "hi", "--out", str(tmp_path / "o.wav")])
    assert local.worker_config(args, tmp_path).model_dir == str(newest)
    assert load.resolve_model() == newest
    assert load.resolve_model("CosyVoice2-0.5B") == models_env / "CosyVoice2-0.5B"  # a bare name, looked up there


def test_download_fetches_into_the_variables_folder(models_env, monkeypatch):
    fetched = []
    monkeypatch.setattr(download, "_fetch", lambda model, files, destination, *rest: fetched.append(destination))
    download.download_model("cosyvoice3")
    assert fetched == [models_env / download.MODELS["cosyvoice3"].folder]


def test_the_model_menu_follows_detect_version(tmp_path):
    _model_folder(tmp_path, "a")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "cosyvoice.yaml").write_text("{}\n")  # a v1 folder: detect_version refuses it
    both = _model_folder(tmp_path, "both")
    (both / "cosyvoice2.yaml").write_text("{}\n")
    host = ModelHost(HostConfig(models_dir=tmp_path, outputs_dir=tmp_path, preview=False))
    assert [(choice.name, choice.version) for choice in host.models()] == [("a", "cosyvoice3")]


def test_the_atomic_write_leaves_the_old_file_and_no_temporary_when_the_disk_fails(tmp_path, monkeypatch):
    target = tmp_path / "voices.json"
    target.write_bytes(b"old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(paths.os, "fsync", full)
    with pytest.raises(OSError):
        paths.atomic_write(target, b"new")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["voices.json"]


def test_the_one_command_serves_and_runs_every_cli_command():
    from importlib.metadata import entry_points

    (script,) = [point for point in entry_points(group="console_scripts") if point.name == "cosyvoice-mac"]
    assert script.value == "cosyvoice_mac.app:main"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "import sys; from cosyvoice_mac.app import main; sys.exit(main(sys.argv[1:]))"]
    for words, expected in [
        (["--help"], "dialogue"),
        (["serve", "--help"], "--allowed-origin"),
        (["download", "--help"], "cosyvoice3"),
        (["bench", "--help"], "--tokens"),
        (["synth", "--help"], "--prompt-wav"),
    ]:
        done = subprocess.run(command + words, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0 and expected in done.stdout, (words, done.stderr)
    done = subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac", "serve", "--port", "0x"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "--port" in done.stderr and "Traceback" not in done.stderr


def _glossary_write(folder: Path, monkeypatch):
    from cosyvoice_mac.frontend.glossary import GlossaryEntry, glossary_store

    store = glossary_store(folder)
    store.replace([GlossaryEntry("old", "kept")])
    return lambda: store.replace([GlossaryEntry("new", "lost")]), store.path


def _batch_write(folder: Path, monkeypatch):
    from cosyvoice_mac.longform.batch import BatchFolder, BatchItem

    batch = BatchFolder(folder / "batch")
    batch.record(BatchItem(1, "first", "001.wav"), "key-1")
    return lambda: batch.record(BatchItem(2, "second", "002.wav"), "key-2"), batch.manifest_path


def _batch_zip_write(folder: Path, monkeypatch):
    from cosyvoice_mac.longform.batch import BatchFolder, BatchItem

    batch = BatchFolder(folder / "batch")
    batch.folder.mkdir()
    first, second = BatchItem(1, "first", "001.wav"), BatchItem(2, "second", "002.wav")
    (batch.folder / first.file).write_bytes(b"RIFF first")
    (batch.folder / second.file).write_bytes(b"RIFF second")
    return lambda: batch.zip([first, second]), batch.zip([first])


def _probe_write(folder: Path, monkeypatch):
    from cosyvoice_mac.pipeline.probe import write_cache

    path = folder / "probe.json"
    write_cache(path, "first", {}, 1.0)
    return lambda: write_cache(path, "second", {}, 1.0), path


def _mlx_llm_cache_write(folder: Path, monkeypatch):
    mx = pytest.importorskip("mlx.core")
    from cosyvoice_mac.mlx.llm_weights import save

    path = folder / "cache" / "llm-int8.safetensors"
    save(path, {"weight": mx.zeros((4,))}, "int8")
    return lambda: save(path, {"weight": mx.ones((8,))}, "int8"), path


def _mlx_checkpoint_cache_write(folder: Path, monkeypatch):
    pytest.importorskip("mlx.core")
    import torch

    from cosyvoice_mac.mlx.convert import load_converted, source_digest

    checkpoint = folder / "flow.pt"
    torch.save({"weight": torch.ones(4)}, checkpoint)
    cache = folder / "cache"
    cache.mkdir()
    cached = cache / f"{source_digest(checkpoint, cache)}-native.safetensors"

    def convert_again():
        assert load_converted(checkpoint, cache_dir=cache)["weight"].shape == (4,)  # read all the same

    return convert_again, cached  # no cache file before; a full disk leaves none


def _asr_complete_marker_write(folder: Path, monkeypatch):
    from cosyvoice_mac.engine.asr import COMPLETE_MARKER, ModelStore

    def download(repo_id, target, progress):
        (target / "model.bin").write_bytes(b"weights")

    store = ModelStore(folder / "asr", allow_download=True, download=download)
    # the marker says the download is whole: it is never there unless it is on disk
    return store.fetch_multilingual, store.multilingual_folder / COMPLETE_MARKER


def _rl_choice_write(folder: Path, monkeypatch):
    from cosyvoice_mac import download
    from cosyvoice_mac.pipeline.model_dir import LLM_CHOICE_FILE

    model = folder / download.MODELS["cosyvoice3"].folder
    monkeypatch.setattr(download, "_fetch", lambda model_info, files, destination, *rest: destination)
    model.mkdir()
    (model / LLM_CHOICE_FILE).write_text('{"llm": "llm.pt"}\n')
    return lambda: download.download_model("cosyvoice3", folder, rl=True), model / LLM_CHOICE_FILE


def _glossary_export_write(folder: Path, monkeypatch):
    import argparse

    from cosyvoice_mac.cli import longform
    from cosyvoice_mac.frontend.glossary import GlossaryEntry, glossary_store

    store = glossary_store(folder)
    store.replace([GlossaryEntry("GIF", "jif")])
    monkeypatch.setattr(longform, "_store", lambda: store)
    exported = folder / "glossary.csv"
    exported.write_text("key,replacement,language\nold,kept,all\n")
    args = argparse.Namespace(action="export", file=exported, local=True, server=None, api_key=None)
    return lambda: longform._glossary(args), exported


def _remote_results_write(folder: Path, monkeypatch):
    import zipfile

    from cosyvoice_mac.cli.remote_longform import _unpack

    archive = folder / "batch.zip"
    with zipfile.ZipFile(archive, "w") as files:
        files.writestr("batch/001.wav", b"RIFF new")
    out = folder / "out"
    out.mkdir()
    (out / "001.wav").write_bytes(b"RIFF old")
    return lambda: _unpack(archive, out), out / "001.wav"


def _doctor_report_write(folder: Path, monkeypatch):
    from cosyvoice_mac.bench import doctor

    monkeypatch.setattr(doctor, "probe_engines", lambda: [])
    monkeypatch.setattr(doctor, "probe_onnx_providers", lambda: [])
    report = folder / "doctor.json"
    report.write_text('{"doctor_version": 1}')
    return lambda: doctor.main(["--json", str(report), "--no-synthesis", "--no-parity"]), report


WRITERS = {
    "glossary": _glossary_write,
    "batch": _batch_write,
    "batch-zip": _batch_zip_write,
    "probe": _probe_write,
    "mlx-llm-cache": _mlx_llm_cache_write,
    "mlx-checkpoint-cache": _mlx_checkpoint_cache_write,
    "asr-complete-marker": _asr_complete_marker_write,
    "rl-choice": _rl_choice_write,
    "glossary-export": _glossary_export_write,
    "remote-results": _remote_results_write,
    "doctor-report": _doctor_report_write,
}


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
def test_every_saved_state_goes_through_the_one_atomic_write(writer, tmp_path, monkeypatch):
    """Each file the app writes is flushed to disk before it takes its name: when that fails (a full disk)
    the last whole file stays (or none, where there was none) and no temporary is left."""
    write_again, path = writer(tmp_path, monkeypatch)
    before = path.read_bytes() if path.exists() else None

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(paths.os, "fsync", full)
    try:
        write_again()
    except OSError:
        pass  # the caches and the recogniser swallow it (it costs a conversion next time); the others report it
    assert (path.read_bytes() if path.exists() else None) == before
    assert [name for name in os.listdir(path.parent) if name.endswith((".tmp", ".partial.safetensors"))] == []


def test_an_exclusive_atomic_write_never_replaces_a_file_and_of_two_writers_one_wins(tmp_path):
    target = tmp_path / "result.wav"
    paths.atomic_write(target, b"first", replace=False)
    with pytest.raises(FileExistsError):
        paths.atomic_write(target, b"second", replace=False)
    assert target.read_bytes() == b"first" and os.listdir(tmp_path) == ["result.wav"]  # no temporary left
    outcomes = []

    def write(data):
        try:
            paths.atomic_write(tmp_path / "race.wav", data, replace=False)
            outcomes.append(data)
        except FileExistsError:
            outcomes.append(None)

    import threading

    writers = [threading.Thread(target=write, args=(bytes([n]) * 1000,)) for n in range(8)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    winners = [data for data in outcomes if data is not None]
    assert len(winners) == 1 and (tmp_path / "race.wav").read_bytes() == winners[0]


def test_an_exclusive_write_works_where_hard_links_do_not(tmp_path, monkeypatch):
    def no_links(source, target):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(paths.os, "link", no_links)
    paths.atomic_write(tmp_path / "a.wav", b"whole", replace=False)
    with pytest.raises(FileExistsError):
        paths.atomic_write(tmp_path / "a.wav", b"other", replace=False)
    assert (tmp_path / "a.wav").read_bytes() == b"whole" and os.listdir(tmp_path) == ["a.wav"]
