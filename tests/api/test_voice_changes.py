"""Saved voices renamed (``PATCH /v1/voices/{id}``) and replaced (``PUT``), through the API and through the
``voices`` command (``--server`` goes to the running app; with no action it lists and explains)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import soundfile

from cosyvoice_mac.cli.main import main
from tests.browser.conftest import REPO_ROOT


def _create(url: str, audio, name: str) -> dict:
    with open(audio, "rb") as recording:
        answer = httpx.post(url + "v1/voices", data={"name": name}, files={"audio": recording}, timeout=300)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _listed(url: str) -> dict[str, dict]:
    return {voice["name"]: voice for voice in httpx.get(url + "v1/voices", timeout=30).json()["data"]}


def test_a_voice_is_renamed_given_a_transcript_and_replaced_through_the_api(api_app, make_speech):
    url = api_app.url
    created = _create(url, make_speech("The first recording of this voice, please.", seconds=4.0), "API first")
    _create(url, make_speech("Somebody else speaking here, thank you.", seconds=4.0), "API taken")

    renamed = httpx.patch(f"{url}v1/voices/{created['id']}", json={"name": "API renamed"}, timeout=30)
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "API renamed" and "API first" not in _listed(url)
    taken = httpx.patch(f"{url}v1/voices/API renamed", json={"name": "API taken"}, timeout=30)
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "voice_exists"
    empty = httpx.patch(f"{url}v1/voices/API renamed", json={}, timeout=30)
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "name"
    missing = httpx.patch(f"{url}v1/voices/nobody", json={"name": "x"}, timeout=30)
    assert missing.status_code == 404
    told = httpx.patch(f"{url}v1/voices/API renamed", json={"transcript": "The first recording."}, timeout=30)
    assert told.status_code == 200 and told.json()["transcript"] == "The first recording."

    second = make_speech("A second recording of the renamed voice, which replaces it.", seconds=5.0)
    with open(second, "rb") as recording:
        replaced = httpx.put(
            f"{url}v1/voices/API renamed", data={"transcript": "A second recording."}, files={"audio": recording}
        )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["transcript"] == "A second recording." and replaced.json()["name"] == "API renamed"
    no_audio = httpx.put(f"{url}v1/voices/API renamed", data={"transcript": "x"}, timeout=30)
    assert no_audio.status_code == 400 and no_audio.json()["error"]["param"] == "audio"
    for name in ("API renamed", "API taken"):
        assert httpx.delete(f"{url}v1/voices/{name}", timeout=30).status_code == 200


def test_a_voice_no_job_could_use_is_refused_at_every_api_door_and_a_refused_put_keeps_the_old(
    api_app, make_speech, tmp_path
):
    """A 100,000-character transcript, the name ``preview`` (then shadowed by the built-in voice) and a pure
    tone (which conversion refuses as no speech) were all saved; now each door refuses them with a 400 naming
    the field, and a PUT refused leaves the voice's recording as it was."""
    url, speech = api_app.url, make_speech("Somebody speaking clearly for this voice, please.", seconds=4.0)
    pure_tone = tmp_path / "my tone.wav"
    soundfile.write(pure_tone, 0.3 * np.sin(2 * np.pi * 220 * np.arange(72000) / 24000), 24000, subtype="PCM_16")

    def refused(answer: httpx.Response, param: str, says: str) -> None:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == param and says in answer.json()["error"]["message"], answer.text

    def post(data: dict, audio) -> httpx.Response:
        with open(audio, "rb") as recording:
            return httpx.post(url + "v1/voices", data=data, files={"audio": (audio.name, recording)}, timeout=300)

    refused(post({"name": "preview"}, speech), "name", "built-in preview voice")
    refused(post({"name": "Wordy", "transcript": "x" * 100_000}, speech), "transcript", "the limit is 1,000")
    refused(post({"name": "Tone"}, pure_tone), "audio", "my tone.wav holds no speech")
    with open(speech, "rb") as recording:
        kept = httpx.post(url + "v1/voices", data={"name": "Kept", "transcript": "Words."}, files={"audio": recording})
    assert kept.status_code == 201, kept.text
    index = api_app.root / "cache" / "voices" / "voices.json"
    before = json.loads(index.read_text())["voices"]["Kept"]
    refused(httpx.patch(f"{url}v1/voices/Kept", json={"name": "preview"}, timeout=30), "name", "built-in")
    long_words = {"name": "Kept too", "transcript": "y" * 1001}  # neither change is made
    refused(httpx.patch(f"{url}v1/voices/Kept", json=long_words, timeout=30), "transcript", "1,001 characters")
    with open(pure_tone, "rb") as recording:
        put = httpx.put(f"{url}v1/voices/Kept", files={"audio": ("my tone.wav", recording)}, timeout=300)
    refused(put, "audio", "holds no speech")
    assert json.loads(index.read_text())["voices"]["Kept"] == before  # its recording, name and transcript
    with open(pure_tone, "rb") as recording:
        spoken = httpx.post(
            url + "v1/audio/speech/recording",
            data={"body": json.dumps({"model": "tts-1", "input": "Hello."})},
            files={"prompt_audio": ("my tone.wav", recording)},
            timeout=300,
        )
    refused(spoken, "prompt_audio", "my tone.wav holds no speech")
    with open(speech, "rb") as recording:  # issue 50 item 10: the part of the prompt to use, in words it can read
        trimmed = httpx.post(
            url + "v1/audio/speech/recording",
            data={"body": json.dumps({"model": "tts-1", "input": "Hello."}), "prompt_trim": "the best bit"},
            files={"prompt_audio": ("speech.wav", recording)},
            timeout=300,
        )
    refused(trimmed, "prompt_trim", "a span of the recording in seconds such as 12.5-24.5")
    assert {"preview", "Wordy", "Tone", "Kept too"}.isdisjoint(
        name for name, voice in _listed(url).items() if voice["type"] != "builtin"
    )
    assert httpx.delete(f"{url}v1/voices/Kept", timeout=30).status_code == 200


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_the_voices_command_changes_the_running_app_s_voices(api_app, make_speech, tmp_path):
    server = ("--server", api_app.url)
    first = make_speech("The command line keeps this voice, please.", seconds=4.0)
    added = _cli("voices", "add", "CLI voice", "--audio", str(first), *server)
    assert added.returncode == 0, added.stderr
    assert "CLI voice" in _listed(api_app.url)
    renamed = _cli("voices", "rename", "CLI voice", "CLI renamed", *server)
    assert renamed.returncode == 0 and "renamed voice 'CLI voice' to 'CLI renamed'" in renamed.stdout
    second = make_speech("The replacement recording for the command line voice.", seconds=5.0)
    replaced = _cli("voices", "replace", "CLI renamed", "--audio", str(second), "--transcript", "Replaced.", *server)
    assert replaced.returncode == 0, replaced.stderr
    assert _listed(api_app.url)["CLI renamed"]["transcript"] == "Replaced."
    listed = _cli("voices", *server)  # no action: the list, then what the actions are
    assert listed.returncode == 0 and "CLI renamed\tReplaced." in listed.stdout and "voices rename" in listed.stderr
    unknown = _cli("voices", "rename", "nobody", "x", *server)
    assert unknown.returncode == 2 and "no saved voice named 'nobody'" in unknown.stderr
    assert _cli("voices", "delete", "CLI renamed", *server).returncode == 0
    assert "CLI renamed" not in _listed(api_app.url)


def test_the_voices_command_without_an_action_lists_this_machine_s_voices(tmp_path, monkeypatch, capsys, make_speech):
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COSYVOICE_SERVER", raising=False)
    assert main(["voices"]) == 0
    out = capsys.readouterr()
    assert "no saved voices yet" in out.err and "voices add NAME --audio FILE" in out.err
    recording = str(make_speech("A local voice for the command line.", seconds=4.0))
    assert main(["voices", "add", "Local", "--audio", recording]) == 0
    assert main(["voices", "rename", "Local", "Local two"]) == 0
    assert main(["voices", "replace", "Local two", "--audio", recording, "--transcript", "Hi."]) == 0
    capsys.readouterr()
    assert main(["voices", "list"]) == 0
    assert capsys.readouterr().out == "Local two\tHi.\n"
    assert main(["voices", "replace", "Nobody", "--audio", recording]) == 2
    assert "no saved voice named 'Nobody'" in capsys.readouterr().err
    pure_tone = tmp_path / "hum.wav"
    soundfile.write(pure_tone, 0.3 * np.sin(2 * np.pi * 220 * np.arange(72000) / 24000), 24000, subtype="PCM_16")
    for arguments, says in (  # the voice library's one rule, as the app's doors apply it
        (["add", "preview", "--audio", recording], "built-in preview voice"),
        (["add", "Wordy", "--audio", recording, "--transcript", "x" * 1001], "the limit is 1,000"),
        (["add", "Hum", "--audio", str(pure_tone)], "hum.wav holds no speech"),
        (["replace", "Local two", "--audio", str(pure_tone)], "hum.wav holds no speech"),
        (["rename", "Local two", "Preview"], "built-in preview voice"),
    ):
        assert main(["voices", *arguments]) == 2, arguments
        assert says in capsys.readouterr().err, arguments
    assert json.loads((tmp_path / "cache" / "voices" / "voices.json").read_text())["voices"].keys() == {"Local two"}


def test_the_cli_finds_the_running_app_by_cosyvoice_server_or_by_the_address_it_recorded(
    api_app, make_speech, monkeypatch, capsys, tmp_path
):
    """Issue 50 item 9: ``voices`` follows $COSYVOICE_SERVER as every command does, and with no variable the
    commands find the app on its own port (not the default) through the address it recorded in its cache folder."""
    _create(api_app.url, make_speech("The app keeps this voice for the command line.", seconds=4.0), "Found")
    elsewhere = tmp_path / "elsewhere"  # this machine's voice library as the CLI sees it: empty
    elsewhere.mkdir()
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(elsewhere))
    try:
        monkeypatch.setenv("COSYVOICE_SERVER", api_app.url)
        assert main(["voices"]) == 0
        assert "Found\t" in capsys.readouterr().out
        monkeypatch.delenv("COSYVOICE_SERVER")
        record = json.loads((api_app.root / "cache" / "running-app.json").read_text())
        assert record == {"url": api_app.url, "pid": api_app.process.pid}
        (elsewhere / "running-app.json").write_text(json.dumps(record))  # as if the app served this library
        assert main(["voices", "list"]) == 0
        assert "Found\t" in capsys.readouterr().out
        out = tmp_path / "found.wav"
        assert main(["synth", "--voice", "Found", "--text", "Found by its address.", "--out", str(out)]) == 0
        sidecars = [json.loads(path.read_text()) for path in api_app.outputs.glob("*.json")]
        sidecars = [found for found in sidecars if isinstance(found, dict)]  # a checked result's .words.json: a list
        assert any(s["interface"] == "cli" and s["text"] == "Found by its address." for s in sidecars)
        ended = subprocess.Popen([sys.executable, "-c", ""])
        ended.wait()  # an app killed without closing leaves its record behind, naming a process that is gone
        (elsewhere / "running-app.json").write_text(json.dumps({"url": api_app.url, "pid": ended.pid}))
        assert main(["voices"]) == 0
        assert "no saved voices yet" in capsys.readouterr().err  # a stale record is not followed
    finally:
        httpx.delete(f"{api_app.url}v1/voices/Found", timeout=30)
