"""What can be wrong with a voice prompt, each problem said in one plain English sentence.

The page process (``prompt_check``), the API and the CLI (the check's ``sentence``) and the model worker
(``AudioInputError`` raised by ``read`` and ``frontend.prompt_audio``) all say a problem with the sentence
here, filled from the problem's details. The page shows its own translations of the same sentences
(``webui/strings*.py``, keyed by problem in ``webui.render.PROMPT_PROBLEM_KEYS``); a test keeps the page's
English equal to these.
"""

from __future__ import annotations

from cosyvoice_mac.errors import InputError

# problem -> the sentence, formatted with the problem's details (name: the file's name; speech, limit: seconds)
SENTENCES = {
    "missing": "{name} does not exist, or is no longer on the server (uploads are kept for a while only). "
    "Check the file name or upload it again.",
    "unreadable": "{name} cannot be read ({why}). Pick an audio file you may read, or copy it to this computer.",
    "empty": "{name} is an empty file (0 bytes). Record or export it again.",
    "no_samples": "{name} contains no audio samples. Record or export it again.",
    "not_audio": "{name} is not an audio file this app can read (expected WAV, FLAC, OGG, MP3 or M4A). "
    "Export the recording as WAV and try again.",
    "invalid_samples": "{name} holds invalid samples (NaN or infinity); export it again as WAV or FLAC.",
    "no_decoder": "{name}: this machine has no decoder for {suffix} files. Install ffmpeg (macOS: brew install "
    "ffmpeg; Debian/Ubuntu: sudo apt-get install ffmpeg) or save the recording as WAV, FLAC or MP3.",
    "low_rate": "{name} is sampled at {rate} Hz; a voice prompt needs at least {limit} Hz (phone-quality audio "
    "lacks the high frequencies the model listens to). Record or export it at 16 kHz or higher.",
    "odd_rate": "{name} uses an unusual sample rate ({rate} Hz) that cannot be converted to {target} Hz "
    "efficiently. Export it at a standard rate such as 16000, 44100 or 48000 Hz.",
    "silent": "{name} is silent (its loudest sample is below -60 dBFS). Check the microphone and record again.",
    "too_short": "{name} holds only {speech:.1f} s of sound; a voice prompt needs at least {limit:g} s "
    "(5-15 s of clear speech works best). Record a longer sample.",
    "too_long": "{name} has {speech:.1f} s of speech; the model takes at most {limit:g} s. "
    "Cut it to one clear sentence or a few (5-15 s is plenty).",
    "not_speech": "{name} holds no speech (only a tone, noise or music was heard); a voice is taken from someone "
    "speaking. Record or pick a recording of a voice.",
}
PROBLEMS = tuple(SENTENCES)
# What can be wrong with a recording to convert (voice conversion) beyond what can be wrong with any file.
SOURCE_SENTENCES = {
    "source_low_rate": "{name} is sampled at {rate} Hz; a recording to convert needs at least {limit} Hz. "
    "Export it at 8 kHz or higher.",
    "source_too_long": "{name} is {seconds:.0f} s long; a recording to convert may be at most {limit:g} s "
    "({minutes:g} minutes). Cut it into parts and convert each.",
    "no_speech": "{name} holds no speech to convert (only silence, noise or music was heard). "
    "Pick a recording of someone speaking.",
    "too_little_speech": "{name} holds only {speech:.1f} s of speech; converting needs at least {limit:g} s. "
    "Pick a recording with a few words in it.",
}
SOURCE_PROBLEMS = tuple(SOURCE_SENTENCES)


def sentence(problem: str, details: dict) -> str:
    """The plain English sentence for ``problem`` (one of PROBLEMS or SOURCE_PROBLEMS), filled from ``details``."""
    return {**SENTENCES, **SOURCE_SENTENCES}[problem].format(**details)


class AudioInputError(InputError):
    """A recording we cannot use as a voice prompt: ``problem`` is one of PROBLEMS, ``details`` fill its
    sentence, and ``str()`` is that sentence, for the user. Always the prompt recording's fault."""

    field = "prompt_audio"

    def __init__(self, problem: str, **details):
        if problem not in SENTENCES and problem not in SOURCE_SENTENCES:
            raise ValueError(f"unknown AudioInputError problem {problem!r}")
        super().__init__(sentence(problem, details))
        self.problem, self.details = problem, details
