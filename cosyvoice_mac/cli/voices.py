"""``voices``: list, add, rename, replace and delete saved voices, give a voice recordings in more styles, and
export voices to a voices file or import one, in the running app's library (through ``/v1/voices``, so the app's
worker prepares a new recording and its page's menus follow), found as every other command finds it (``--server``,
else ``$COSYVOICE_SERVER``, else the address the app recorded, else the default address); with no app answering
there, in this machine's voice library.

Without an action it lists the voices and says what the actions are, rather than failing on a missing argument.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.settings import add_argument

ACTIONS = ("list", "add", "rename", "replace", "delete", "style", "export", "import")
USAGE = (
    "voices list                                   the saved voices\n"
    "voices add NAME --audio FILE [--transcript T]  keep a 3-30 s recording as a voice\n"
    "voices rename NAME NEW_NAME                    give a voice another name\n"
    "voices replace NAME --audio FILE [--transcript T]  overwrite a voice's recording, keeping its name\n"
    "voices delete NAME                             forget a voice\n"
    "voices style NAME STYLE --audio FILE [--transcript T]  one more recording of a voice, in a style\n"
    "voices export [NAME] [--output FILE]           a voice (no NAME: every voice) as one voices file\n"
    "voices import FILE                             add the voices of a voices file (a taken name is renamed)\n"
    "they are the running app's voices (--server URL, else $COSYVOICE_SERVER, else the app on this machine);\n"
    "with no app running, this machine's voice library"
)


def add_voices(commands) -> None:
    voices = commands.add_parser(
        "voices",
        help="list, add, rename, replace or delete saved voices",
        description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    voices.add_argument("action", nargs="?", choices=ACTIONS, help="what to do (none: list them and show this)")
    voices.add_argument("name", nargs="?", help="the voice's name")
    voices.add_argument("new_name", nargs="?", help="the new name (rename), the style (style)")
    voices.add_argument("--audio", type=Path, help="3-30 s recording of the voice (add, replace)")
    voices.add_argument("--transcript", help="what the recording says (zero-shot mode needs it)")
    voices.add_argument("--output", "-o", type=Path, help="the voices file to write (export; never overwritten)")
    add_argument(voices, "voices_server", dest="server")
    add_argument(voices, "api_key")
    voices.set_defaults(handler=run_voices)


def run_voices(args) -> int:
    library = _library(args)
    try:
        return _act(args, library)
    finally:
        library.close()


def _act(args, library) -> int:
    action = args.action or "list"
    if action == "list":
        entries = library.list()
        for entry in entries:
            print(f"{entry['name']}\t{entry.get('transcript') or '(no transcript: cross-lingual only)'}")
        if not entries:
            print("no saved voices yet", file=sys.stderr)
        if args.action is None:
            print("\n" + USAGE, file=sys.stderr)
        return 0
    if action == "export":
        return _export(args, library)
    if not args.name:
        raise CosyVoiceError(f"voices {action} needs the voice's NAME\n{USAGE}")
    if action == "import":
        for entry in library.import_file(Path(args.name)):
            renamed = f" (renamed from {entry['name_in_file']!r}: the name was taken)" if entry["renamed"] else ""
            print(f"imported voice {entry['name']!r}{renamed}, styles: {', '.join(entry['styles'])}")
        return 0
    if action == "rename":
        if not args.new_name:
            raise CosyVoiceError("voices rename needs the NAME and the NEW_NAME")
        entry = library.rename(args.name, args.new_name)
        print(f"renamed voice {args.name!r} to {entry['name']!r}")
        return 0
    if action == "delete":
        library.delete(args.name)
        print(f"deleted voice {args.name!r}")
        return 0
    if args.audio is None:
        raise CosyVoiceError(f"voices {action} needs --audio FILE (a 3-30 s recording)")
    if not args.audio.is_file():
        raise CosyVoiceError(f"--audio: {args.audio} does not exist")
    transcript = (args.transcript or "").strip() or None
    if action == "style":
        if not args.new_name:
            raise CosyVoiceError("voices style needs the NAME and the STYLE (one lowercase word: happy, whisper, ...)")
        library.add_style(args.name, args.new_name, args.audio, transcript)
        print(f"saved the {args.new_name.strip()!r} recording of voice {args.name!r}")
        return 0
    entry = library.save(args.name, args.audio, transcript, replace=action == "replace")
    print(f"{'replaced' if action == 'replace' else 'saved'} voice {entry['name']!r}")
    return 0


def _export(args, library) -> int:
    from cosyvoice_mac.paths import atomic_write
    from cosyvoice_mac.voice_file import SUFFIX

    data, suggested = library.export(args.name)
    target = args.output or Path(suggested)
    try:
        atomic_write(target, data, replace=False)
    except FileExistsError:
        raise CosyVoiceError(f"{target} exists already; pick another --output") from None
    except OSError as error:
        raise CosyVoiceError(f"the voices file cannot be written to {target}: {error.strerror}") from None
    print(f"wrote {target} ({len(data):,} bytes{'' if target.name.endswith(SUFFIX) else ', a zip'})")
    return 0


def _file_name(name: str | None) -> str:
    import re

    from cosyvoice_mac.voice_file import SUFFIX

    return (re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "voice" if name else "voices") + SUFFIX


def _library(args):
    """The running app's voices, else (no ``--server`` given and no app answering) this machine's library."""
    from cosyvoice_mac.cli.remote import SERVER_VARIABLE, AppClient, NoApp, default_server

    app = AppClient(args.server or default_server(), args.api_key)
    try:
        app.probe()
    except NoApp as error:
        app.close()
        if args.server:
            raise CosyVoiceError(f"{error}; start the app, or leave out --server to use this machine's voices")
        if os.environ.get(SERVER_VARIABLE, "").strip():
            print(f"note: {error} (${SERVER_VARIABLE}); these are this machine's saved voices", file=sys.stderr)
        return _LocalVoices()
    except BaseException:
        app.close()
        raise
    return _AppVoices(app)


class _LocalVoices:
    """This machine's voice library (the app's, when it runs with the default cache folder)."""

    def __init__(self):
        from cosyvoice_mac.engine.voice_library import VoiceLibrary

        self.library = VoiceLibrary()

    def close(self) -> None:
        pass

    def list(self) -> list[dict]:
        return self.library.list()

    def rename(self, name: str, new_name: str) -> dict:
        return self.library.rename(name, new_name)

    def delete(self, name: str) -> None:
        self.library.delete(name)

    def add_style(self, name: str, style: str, audio: Path, transcript: str | None) -> dict:
        from cosyvoice_mac.frontend.prompt_audio import decode_prompt

        self.library.get(name)  # an unknown voice is refused before the recording is decoded
        decoded = decode_prompt(str(audio))
        return self.library.add_style(
            name, style, audio_hash=decoded.content_hash, model_id="recording", transcript=transcript, audio=audio
        )

    def export(self, name: str | None) -> tuple[bytes, str]:
        from cosyvoice_mac.engine.voice_transfer import export_voices

        return export_voices(self.library, None if name is None else [name]), _file_name(name)

    def import_file(self, path: Path) -> list[dict]:
        from cosyvoice_mac.engine.voice_transfer import import_voices

        saved = import_voices(self.library, path)
        return [
            {
                "name": entry["name"],
                "name_in_file": entry["name_in_file"],
                "renamed": entry["name"] != entry["name_in_file"],
                "styles": [recording["style"] for recording in self.library.recordings(entry["name"])],
            }
            for entry in saved
        ]

    def save(self, name: str, audio: Path, transcript: str | None, replace: bool) -> dict:
        from cosyvoice_mac.frontend.prompt_audio import decode_prompt

        if replace:
            self.library.get(name)  # only a voice that exists is replaced
        decoded = decode_prompt(str(audio))  # refuses what is not usable speech audio, with the reason
        return self.library.save(
            name,
            audio_hash=decoded.content_hash,
            model_id="recording",
            transcript=transcript,
            audio=audio,
            overwrite=replace,
        )


class _AppVoices:
    """The running app's voice library, through ``/v1/voices``."""

    def __init__(self, app):
        self.app = app  # a probed ``cli.remote.AppClient``

    def close(self) -> None:
        self.app.close()

    def _call(self, method: str, path: str, **options) -> dict:
        return self._answer(method, path, **options).json()

    def _answer(self, method: str, path: str, **options):
        from cosyvoice_mac.wire import VOICES_PATH

        answer = self.app.http.request(method, VOICES_PATH + path, timeout=900, **options)
        if answer.status_code >= 400:
            raise self.app.explain(answer)
        return answer

    def add_style(self, name: str, style: str, audio: Path, transcript: str | None) -> dict:
        form = {"style": style, **({"transcript": transcript} if transcript else {})}
        with audio.open("rb") as recording:
            return self._call("POST", f"/{self._id(name)}/styles", data=form, files={"audio": (audio.name, recording)})

    def export(self, name: str | None) -> tuple[bytes, str]:
        return self._answer("GET", "/export" if name is None else f"/{self._id(name)}/export").content, _file_name(name)

    def import_file(self, path: Path) -> list[dict]:
        if not path.is_file():
            raise CosyVoiceError(f"the voices file {path} does not exist")
        with path.open("rb") as voices_file:
            saved = self._call("POST", "/import", files={"file": (path.name, voices_file)})["data"]
        return [
            {**entry, "renamed": entry["name"] != entry["name_in_file"], "styles": entry["styles"]} for entry in saved
        ]

    def _id(self, name: str) -> str:
        for entry in self.list():
            if name in (entry["name"], entry["id"]) and entry["id"] != "preview":
                return entry["id"]
        known = ", ".join(entry["name"] for entry in self.list()) or "none saved yet"
        raise CosyVoiceError(f"the app has no saved voice named {name!r} (its voices: {known})")

    def list(self) -> list[dict]:
        return [entry for entry in self._call("GET", "")["data"] if entry.get("type") != "builtin"]

    def rename(self, name: str, new_name: str) -> dict:
        return self._call("PATCH", f"/{self._id(name)}", json={"name": new_name})

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/{self._id(name)}")

    def save(self, name: str, audio: Path, transcript: str | None, replace: bool) -> dict:
        form = {"transcript": transcript} if transcript else {}
        with audio.open("rb") as recording:
            files = {"audio": (audio.name, recording)}
            if replace:
                return self._call("PUT", f"/{self._id(name)}", data=form, files=files)
            return self._call("POST", "", data={"name": name, **form}, files=files)
