"""A result's take check and word captions as the page shows them, for the last result and for a picked history
entry alike: the verdict (passed, retaken, flagged), each sentence's note and takes (seed, what was wrong, what the
recogniser heard), the captions as text under the player (each word carrying its times, so the word being spoken
is marked while it plays), the caption files to download, and the other kept takes to put in the output instead
(``engine.take_pick``). Read from the files beside the WAV (its sidecar's
``check``, ``<stem>.srt``/``.vtt``/``.words.json``), so a reload or a restart shows the same.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import NamedTuple

import gradio as gr

from cosyvoice_mac.engine.sidecar import read_sidecar
from cosyvoice_mac.engine.take_pick import TakePickError, takes_to_pick, use_take
from cosyvoice_mac.pipeline.takes import FLAGGED, PASSED
from cosyvoice_mac.pipeline.takes.captions import FORMATS, SUFFIXES, cue_groups
from cosyvoice_mac.pipeline.takes.check import Word
from cosyvoice_mac.webui.strings import text as say

CHECK_MARKS = {"passed": "✅", "retaken": "🔁", "flagged": "⚠️"}
# The caption word being spoken is marked as the captions' own player plays (media events do not bubble, so the
# listener catches them on their way down); a statement for the page's load script (``page.title_js``).
CAPTIONS_FOLLOW_JS = (
    "document.addEventListener('timeupdate', (event) => {"
    " const box = event.target.closest && event.target.closest('.cv-captions'); if (!box) return;"
    " const now = event.target.currentTime;"
    " box.querySelectorAll('.cv-word').forEach((word) => word.classList.toggle('cv-word-now',"
    " now >= Number(word.dataset.start) && now < Number(word.dataset.end))); }, true);"
)
CAPTIONS_CSS = ".cv-word-now { background: var(--color-accent-soft); border-radius: 3px; }\n"


class TakesPanel(NamedTuple):
    """The controls that show one result's check and captions and put another of its takes in it (``elem_id``
    prefix: the tests' handles)."""

    check: gr.Markdown
    captions: gr.HTML
    files: gr.File
    pick: gr.Dropdown  # the takes that could replace their sentence's kept one (``take_pick.takes_to_pick``)
    use: gr.Button


def build_takes_panel(make, id_prefix: str) -> TakesPanel:
    """The check's words, the captions and their files, the takes to pick from, in page order (``make``: the
    page's LabelBook.make)."""
    check = gr.Markdown(elem_id=f"{id_prefix}-check", elem_classes="cv-message")
    captions = gr.HTML("", elem_id=f"{id_prefix}-captions")
    files = make(
        gr.File,
        {"label": "captions_files_label"},
        file_count="multiple",
        interactive=False,
        visible=False,
        elem_id=f"{id_prefix}-files",
    )
    with gr.Row():
        pick = make(
            gr.Dropdown,
            {"label": "take_pick_label"},
            choices=[],
            value=None,
            visible=False,
            elem_id=f"{id_prefix}-pick",
        )
        use = make(gr.Button, {"value": "take_use"}, size="sm", visible=False, elem_id=f"{id_prefix}-use")
    return TakesPanel(check, captions, files, pick, use)


def takes_shown(lang: str, wav_path: str | None, said: str = "") -> tuple:
    """The ``TakesPanel``'s values for the result saved at ``wav_path`` (None: nothing shown): the check's words
    (after ``said``, a line of news), captions HTML, the files' update, the takes to pick and the button's."""
    if not wav_path or not Path(wav_path).is_file():
        hidden = gr.update(visible=False)
        return said, "", gr.update(value=None, visible=False), gr.update(choices=[], value=None, visible=False), hidden
    wav = Path(wav_path)
    check = _check(wav)
    files = caption_files(wav)
    choices = [
        (
            say(
                lang,
                "take_pick_choice",
                index=index,
                number=number,
                seed=take.get("seed"),
                verdict=_verdict(lang, take),
            ),
            f"{index}:{number}",
        )
        for index, number, take in takes_to_pick(check)
    ]
    return (
        "  \n".join(part for part in (said, check_words(lang, check)) if part),
        takes_html(lang, check, wav.parent) + captions_html(lang, _words(wav), wav),
        gr.update(value=files or None, visible=bool(files)),
        gr.update(choices=choices, value=None, visible=bool(choices)),
        gr.update(visible=bool(choices)),
    )


def retake_offered(wav_path: str | None) -> dict:
    """The Retake button's update: shown when a sentence of the result saved at ``wav_path`` stayed flagged."""
    check = _check(Path(wav_path)) if wav_path and Path(wav_path).is_file() else None
    return gr.update(visible=bool(check) and check.get("status") == FLAGGED)


def put_take_in(lang: str, wav_path: str | None, choice: str | None) -> tuple[str | None, tuple]:
    """The take ``choice`` ("sentence:take") put in the result saved at ``wav_path``: (the WAV to play again, or None
    when nothing changed, and the ``TakesPanel``'s values, saying what was done or why not)."""
    if not wav_path or not choice:
        return None, takes_shown(lang, wav_path, say(lang, "take_pick_first"))
    sentence, _, take = str(choice).partition(":")
    try:
        use_take(wav_path, int(sentence), int(take))
    except (TakePickError, ValueError) as error:
        return None, takes_shown(lang, wav_path, "⚠️ " + str(error))
    return wav_path, takes_shown(lang, wav_path, say(lang, "take_used", index=sentence, number=take))


def check_words(lang: str, check: dict | None) -> str:
    """The check's verdict and, for each sentence that was retaken or flagged, its note and takes."""
    if not check:
        return say(lang, "check_not_run")
    status = check.get("status", PASSED)
    lines = [CHECK_MARKS.get(status, "") + " " + say(lang, f"check_{status}", seconds=check.get("seconds") or 0.0)]
    for index, sentence in enumerate(check.get("sentences", []), 1):
        if sentence.get("status") == PASSED:
            continue
        lines.append(say(lang, "check_sentence", index=index, note=sentence.get("note") or ""))
        for number, take in enumerate(sentence.get("takes", []), 1):
            key = "check_take_kept" if number == sentence.get("kept") else "check_take"
            lines.append(say(lang, key, number=number, seed=take.get("seed"), verdict=_verdict(lang, take)))
    if check.get("streamed") and status == FLAGGED:
        lines.append(say(lang, "check_streamed_flagged"))
    return "  \n".join(lines)


def captions_html(lang: str, words: list[Word], wav: Path) -> str:
    """The captions under a player of ``wav`` (in outputs/, which the page serves), one cue a line, each word a
    span with its times: the word being spoken is marked as it plays."""
    if not words:
        return ""
    lines = []
    for group in cue_groups(words):
        spans = " ".join(
            f'<span class="cv-word" data-start="{word.start:.3f}" data-end="{word.end:.3f}">'
            f"{html.escape(word.word)}</span>"
            for word in group
        )
        lines.append(f"<div><small>{_clock(group[0].start)}</small> {spans}</div>")
    heading = html.escape(say(lang, "captions_heading"))
    player = f'<audio controls preload="none" src="{html.escape(f"gradio_api/file={wav}", quote=True)}"></audio>'
    return f'<div class="cv-captions"><b>{heading}</b><br>{player}{"".join(lines)}</div>'


def takes_html(lang: str, check: dict | None, outputs: Path) -> str:
    """A player for each take of every sentence made more than once (kept in ``outputs``/takes/), to hear them."""
    rows = []
    for index, sentence in enumerate((check or {}).get("sentences", []), 1):
        if len(sentence.get("takes", [])) < 2:  # one take: it is the output itself
            continue
        for number, take in enumerate(sentence.get("takes", []), 1):
            path = outputs / take["file"] if take.get("file") else None
            if path is None or not path.is_file():
                continue
            label = say(lang, "takes_player", index=index, number=number, seed=take.get("seed"))
            kept = " ▶" if number == sentence.get("kept") else ""
            source = html.escape(f"gradio_api/file={path}", quote=True)
            rows.append(f'<div>{html.escape(label)}{kept} <audio controls preload="none" src="{source}"></audio></div>')
    if not rows:
        return ""
    return f'<div class="cv-takes"><b>{html.escape(say(lang, "takes_players_heading"))}</b>{"".join(rows)}</div>'


def caption_files(wav: Path) -> list[str]:
    """The caption files beside ``wav`` that exist, as the page offers them: SubRip, WebVTT, the word list."""
    return [str(path) for path in (wav.with_suffix(SUFFIXES[kind]) for kind in FORMATS) if path.is_file()]


def _check(wav: Path) -> dict | None:
    sidecar = read_sidecar(wav.with_suffix(".json"))
    return sidecar.recorded.get("check") if sidecar is not None else None


def _verdict(lang: str, take: dict) -> str:
    return ", ".join(take.get("problems") or []) or say(lang, "check_take_passed")


def _words(wav: Path) -> list[Word]:
    try:
        listed = json.loads(wav.with_suffix(SUFFIXES["json"]).read_text(encoding="utf-8"))
        return [Word(str(item["word"]), float(item["start"]), float(item["end"])) for item in listed]
    except (OSError, ValueError, KeyError, TypeError):  # none written (unchecked), or not ours: no captions
        return []


def _clock(seconds: float) -> str:
    minutes, rest = divmod(max(0.0, seconds), 60)
    return f"{int(minutes)}:{rest:04.1f}"
