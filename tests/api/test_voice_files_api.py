"""Voices files through ``/v1`` and the ``voices`` command: a voice with a style exported, deleted and imported
speaks the same audio for a seed; a bad file is refused with its reason and the voice list untouched; the
command does the same against the running app (``--server``) and this machine's library."""

from __future__ import annotations

import io
import json
import zipfile

import httpx

from cosyvoice_mac.cli.main import main
from cosyvoice_mac.wire import JOB_ID_HEADER
from tests.api.conftest import sidecar_for


def _speak(url: str) -> bytes:
    body = {"model": "tts-1", "input": "Carry me home.", "voice": "Portable", "seed": 7, "response_format": "pcm"}
    answer = httpx.post(url + "v1/audio/speech", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    return answer.content


def _gradio_synthesize(url: str, voice: str, style: str) -> str:
    """The event stream of the Gradio API's /synthesize called over REST (its thirteen values: the four sampling
    ones empty, style last)."""
    values = ["Hi.", voice, "", "", 3, 1.0, False, None, None, None, None, None, style]
    started = httpx.post(url + "gradio_api/call/synthesize", json={"data": values}, timeout=30)
    assert started.status_code == 200, started.text
    return httpx.get(url + f"gradio_api/call/synthesize/{started.json()['event_id']}", timeout=300).text


def _speaks_its_styles_and_refuses_another_before_queueing(api_app) -> None:
    """/v1 and the Gradio API speak the voice's whisper recording when asked; an unknown style is refused
    naming the styles it has, and no job is made."""
    url, body = api_app.url, {"model": "tts-1", "input": "Hush.", "voice": "Portable", "response_format": "pcm"}
    whispered = httpx.post(url + "v1/audio/speech", json={**body, "style": "Whisper"}, timeout=300)
    plain = httpx.post(url + "v1/audio/speech", json=body, timeout=300)
    assert whispered.status_code == plain.status_code == 200, whispered.text
    facts = [sidecar_for(api_app, answer.headers[JOB_ID_HEADER]) for answer in (whispered, plain)]
    assert facts[0]["style"] == "whisper" and "style" not in facts[1]
    assert facts[0]["prompt_hash"] != facts[1]["prompt_hash"]  # the whisper recording spoke
    made = sorted(api_app.outputs.glob("*.json"))
    loud = httpx.post(url + "v1/audio/speech", json={**body, "style": "loud"}, timeout=60)
    assert loud.status_code == 404 and loud.json()["error"]["code"] == "style_not_found", loud.text
    assert "its styles: neutral, whisper" in loud.json()["error"]["message"]
    preview = httpx.post(url + "v1/audio/speech", json={**body, "voice": "preview", "style": "whisper"}, timeout=60)
    assert preview.status_code == 400 and preview.json()["error"]["code"] == "style_needs_saved_voice"
    assert "its styles: neutral, whisper" in _gradio_synthesize(url, "Portable", "loud")
    assert sorted(api_app.outputs.glob("*.json")) == made  # nothing was queued
    assert "event: complete" in _gradio_synthesize(url, "Portable", "whisper")
    assert [fact["style"] for fact in _newest_sidecars(api_app, made)] == ["whisper"]


def _newest_sidecars(api_app, before: list) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(set(api_app.outputs.glob("*.json")) - set(before))]


def _library_files(api_app) -> dict[str, bytes]:
    folder = api_app.root / "cache" / "voices"
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


def test_a_voice_file_round_trips_through_the_api_and_a_bad_one_changes_nothing(api_app, make_speech):
    url = api_app.url
    with open(make_speech("A portable voice, carried from one machine to another.", seconds=4.0), "rb") as audio:
        made = httpx.post(
            url + "v1/voices",
            data={"name": "Portable", "transcript": "A portable voice."},
            files={"audio": audio},
            timeout=300,
        )
    assert made.status_code == 201, made.text
    with open(make_speech("Softly now, this is the whispered recording.", seconds=4.0), "rb") as audio:
        styled = httpx.post(
            f"{url}v1/voices/Portable/styles", data={"style": "whisper"}, files={"audio": audio}, timeout=300
        )
    assert styled.status_code == 201 and styled.json()["styles"] == ["neutral", "whisper"], styled.text
    spoken = _speak(url)
    _speaks_its_styles_and_refuses_another_before_queueing(api_app)

    exported = httpx.get(f"{url}v1/voices/{made.json()['id']}/export", timeout=60)
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/zip"
    assert 'filename="Portable.cvvoices.zip"' in exported.headers["content-disposition"]
    assert httpx.delete(f"{url}v1/voices/Portable", timeout=30).status_code == 200

    before = _library_files(api_app)
    cut = httpx.post(f"{url}v1/voices/import", files={"file": ("cut.zip", exported.content[:5000])}, timeout=60)
    assert cut.status_code == 400 and cut.json()["error"]["code"] == "voice_file_not_zip", cut.text
    escaping = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(exported.content)) as source, zipfile.ZipFile(escaping, "w") as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        target.writestr("../../outside.txt", b"x")
    sneaky = httpx.post(f"{url}v1/voices/import", files={"file": ("v.zip", escaping.getvalue())}, timeout=60)
    assert sneaky.status_code == 400 and sneaky.json()["error"]["code"] == "voice_file_unsafe_member", sneaky.text
    assert _library_files(api_app) == before and not (api_app.root / "outside.txt").exists()

    imported = httpx.post(f"{url}v1/voices/import", files={"file": ("p.zip", exported.content)}, timeout=300)
    assert imported.status_code == 201, imported.text
    [voice] = imported.json()["data"]
    assert voice["name"] == "Portable" and voice["styles"] == ["neutral", "whisper"]
    assert voice["transcript"] == "A portable voice." and voice["features_for"] == [made.json()["model"]]
    assert _speak(url) == spoken  # the same voice, the same features: the same audio for the seed
    assert httpx.delete(f"{url}v1/voices/Portable", timeout=30).status_code == 200


def test_the_voices_command_exports_and_imports_through_the_app_and_on_this_machine(
    api_app, make_speech, tmp_path, monkeypatch, capsys
):
    server = ("--server", api_app.url)
    recording = str(make_speech("The command line carries this voice too.", seconds=4.0))
    assert main(["voices", "add", "Carried", "--audio", recording, *server]) == 0
    assert main(["voices", "style", "Carried", "happy", "--audio", recording, *server]) == 0
    said = tmp_path / "said.wav"
    synth = ["synth", "--voice", "Carried", "--text", "Cheer up.", "--out", str(said), *server]
    capsys.readouterr()
    assert main([*synth, "--style", "sad"]) == 2 and not said.exists()  # refused by the app before queueing
    assert "no 'sad' recording; its styles: neutral, happy" in capsys.readouterr().err
    made = sorted(api_app.outputs.glob("*.json"))
    assert main([*synth, "--style", "happy"]) == 0 and said.is_file()
    assert [fact["style"] for fact in _newest_sidecars(api_app, made)] == ["happy"]
    exported = tmp_path / "carried.cvvoices.zip"
    assert main(["voices", "export", "Carried", "--output", str(exported), *server]) == 0
    assert main(["voices", "export", "Carried", "--output", str(exported), *server]) == 2  # never overwritten
    assert "exists already" in capsys.readouterr().err
    assert main(["voices", "import", str(exported), *server]) == 0  # the name is taken: renamed
    assert "imported voice 'Carried (2)' (renamed from 'Carried'" in capsys.readouterr().out
    for name in ("Carried", "Carried (2)"):
        assert main(["voices", "delete", name, *server]) == 0

    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path / "local-cache"))
    damaged = tmp_path / "damaged.cvvoices.zip"
    damaged.write_bytes(exported.read_bytes()[:-100])
    capsys.readouterr()
    assert main(["voices", "import", str(damaged)]) == 2
    assert "no zip archive" in capsys.readouterr().err
    assert not (tmp_path / "local-cache" / "voices" / "voices.json").exists()
    assert main(["voices", "import", str(exported)]) == 0
    assert "imported voice 'Carried', styles: neutral, happy" in capsys.readouterr().out
    assert main(["voices", "export", "--output", str(tmp_path / "all.zip")]) == 0
    with zipfile.ZipFile(tmp_path / "all.zip") as everything:
        assert sum(name.startswith("audio/") for name in everything.namelist()) == 2
