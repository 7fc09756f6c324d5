"""The take check: a good take of real speech passes, and each fault users report (a sentence dropped, a phrase
spoken twice, an ending cut off, noise, a hole of silence, nothing at all) is named in plain words. One preview
take and one recogniser serve the whole module; most fault cases are judged without the recogniser."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("piper")
pytest.importorskip("faster_whisper")

from cosyvoice_mac.engine.asr import ModelStore, Transcriber  # noqa: E402
from cosyvoice_mac.engine.takes import TakeChecker, WhisperRecogniser  # noqa: E402
from cosyvoice_mac.load import load_model  # noqa: E402
from cosyvoice_mac.pipeline.takes import VoiceRates, check_take  # noqa: E402
from cosyvoice_mac.pipeline.takes.signal_checks import duration_bounds  # noqa: E402
from cosyvoice_mac.pipeline.takes.text_match import error_rate, language_of, normalise, repeated_phrases  # noqa: E402

FIRST = "Please call Stella and ask her to bring these things with her from the store."
SECOND = "We will meet at the station at noon tomorrow."


@pytest.fixture(scope="module")
def recogniser(tmp_path_factory):
    """Whisper with only the bundled tiny.en: no multilingual model here, and none fetched."""
    store = ModelStore(folder=tmp_path_factory.mktemp("asr"), allow_download=False)
    return WhisperRecogniser(Transcriber(store))


@pytest.fixture(scope="module")
def spoken(make_speech):
    """The preview voice (real speech) saying FIRST through the library door, checked and timed."""
    voice = load_model("preview")
    return list(voice.synthesize(FIRST, prompt_audio=make_speech(FIRST, voice="en-us+m3"), seed=5, check=True))


@pytest.fixture(scope="module")
def take(spoken):
    """(audio, sample rate) of the preview voice's take."""
    return np.concatenate([result.audio for result in spoken]), spoken[0].sample_rate


def test_the_preview_voice_passes_the_check_in_english(take, recogniser, spoken):
    assert not any(note.startswith(("retaken", "kept take")) for result in spoken for note in result.notes)
    assert [word.word for word in spoken[0].words] == FIRST.split()  # the library door's SynthesisResult.words
    audio, rate = take
    verdict = check_take(audio, rate, FIRST, recogniser)
    assert verdict.passed, verdict.as_dict()
    assert verdict.metric == "WER" and verdict.error_rate <= 0.1 and "tiny.en" in verdict.recogniser
    assert [word.word.lower().strip(".,") for word in verdict.words[:3]] == ["please", "call", "stella"]


def test_a_dropped_sentence_is_heard_missing_and_too_short(take, recogniser):
    audio, rate = take
    verdict = check_take(audio, rate, f"{FIRST} {SECOND} {SECOND}", recogniser)
    assert any(problem.startswith("WER ") for problem in verdict.problems), verdict.problems
    assert any(problem.startswith("too short for the text") for problem in verdict.problems), verdict.problems


def test_a_take_spoken_twice_is_a_repeated_phrase_and_a_repeated_stretch(take, recogniser):
    audio, rate = take
    verdict = check_take(np.concatenate([audio, audio[: len(audio) // 2]]), rate, FIRST, recogniser)
    assert "a phrase repeated" in verdict.problems
    assert "a stretch of audio is repeated" in verdict.problems
    refrain = check_take(np.concatenate([audio, audio]), rate, f"{FIRST} {FIRST}", None)  # the text says it twice
    assert refrain.passed, refrain.problems


def test_an_ending_cut_mid_word_is_caught_without_a_recogniser(take):
    audio, rate = take
    frame = rate // 50
    loud = np.abs(audio[: len(audio) // frame * frame]).reshape(-1, frame).mean(axis=1)
    cut = (len(loud) // 2 + int(np.argmax(loud[len(loud) // 2 :]))) * frame  # the loudest frame of the second half
    verdict = check_take(audio[:cut], rate, FIRST, None)
    assert "the ending is cut off" in verdict.problems
    assert check_take(audio, rate, FIRST, None).passed


def test_the_recogniser_hears_the_missing_end_of_a_truncated_take_after_being_freed(take, recogniser):
    checker = TakeChecker(recogniser)
    assert recogniser.transcriber.loaded  # the earlier checks loaded tiny.en
    checker.release()  # what the low-memory mode does when the worker goes idle
    assert not recogniser.transcriber.loaded
    audio, rate = take
    verdict = check_take(audio[: int(len(audio) * 0.55)], rate, FIRST, recogniser)
    assert verdict.error_rate > 0.25 and f"WER {round(verdict.error_rate * 100)} %" in verdict.problems
    assert recogniser.transcriber.loaded  # loaded again for the next check


def test_noise_a_hole_and_nothing_at_all_are_named(take):
    audio, rate = take
    noise = (0.1 * np.random.default_rng(0).standard_normal(len(audio))).astype(np.float32)
    assert "it sounds like noise, not speech" in check_take(noise, rate, FIRST, None).problems
    half = len(audio) // 2
    holed = np.concatenate([audio[:half], np.zeros(int(2.5 * rate), np.float32), audio[half:]])
    assert check_take(holed, rate, FIRST, None).problems == ["a silence of 2.5 s inside the take"]  # no loop in it
    broken = audio.copy()
    broken[100] = np.nan
    for bad, said in ((broken, "invalid samples"), (np.zeros_like(audio), "silent"), (audio[:0], "empty")):
        verdict = check_take(bad, rate, FIRST, None)
        assert verdict.unusable and said in verdict.summary()


def test_chinese_without_a_multilingual_recogniser_is_not_checked_rather_than_guessed(take, recogniser):
    audio, rate = take
    verdict = check_take(audio, rate, "今天天气很好，我们一起去公园散步吧。", recogniser)
    assert verdict.recogniser == "not checked: no recogniser for zh"
    assert verdict.error_rate is None and not any("CER" in problem for problem in verdict.problems)


def test_both_sides_get_the_same_normalisation_and_chinese_is_compared_by_character():
    assert normalise("Don't STOP — well-known, [laughter] 'quoted'!") == "don't stop well known quoted"
    assert error_rate("Don't stop - it's 9 o'clock!", "don't stop, it's 9 o'clock", "en") == 0.0
    assert error_rate("今天天气很好。", "今天天汽很好", "zh") == pytest.approx(1 / 6)
    assert error_rate("I have twenty-one cats and one thousand dogs.", "I have 21 cats and 1,000 dogs", "en") == 0.0
    assert language_of("今天天气") == "zh" and language_of("こんにちは") == "ja" and language_of("Hello") == "en"
    assert language_of("Où est la gare ?") is None
    assert repeated_phrases("the cat sat down", "the cat sat the cat sat down", "en", 3) == ["the cat sat"]
    assert repeated_phrases("run run run away", "run run run away", "en", 3) == []


def test_a_voices_learned_rate_narrows_its_duration_bounds():
    rates = VoiceRates()
    wide = duration_bounds(10, "en")
    for _ in range(3):
        rates.learn("voice-a", "en", 10, 4.0)
    narrow = duration_bounds(10, "en", learned_seconds_per_unit=rates.seconds_per_unit("voice-a", "en"))
    assert wide[0] < narrow[0] and narrow[1] < wide[1]
    assert rates.seconds_per_unit("voice-b", "en") is None  # another voice learns on its own
    assert duration_bounds(10, "en", speed=2.0)[1] < wide[1]
