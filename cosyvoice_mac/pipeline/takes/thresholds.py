"""Every number the take check judges by, in one place, each with the reason for its value.

A take fails on any one problem; the numbers are set so that a good take of a real model passes them with room
to spare (the preview voice and CosyVoice3 takes of ordinary sentences sit far inside every bound) while the
faults users report (a sentence dropped or spoken twice, a cut-off ending, noise) land well outside. Torch-free.
"""

from __future__ import annotations

# -- the recogniser's verdict ----------------------------------------------------------------------------------
# Whisper tiny.en mishears ~5-10 % of the words of clean synthetic speech (names, numbers written as digits);
# one dropped or doubled clause in a sentence of ~12 words moves the rate past 30 %. 25 % lies between.
MAX_WORD_ERROR_RATE = 0.25
# Character error rate for Chinese/Japanese: a recogniser's homophone slips cost a character each (~5-10 %);
# a dropped clause costs a quarter or more of the characters.
MAX_CHARACTER_ERROR_RATE = 0.20
# Texts this short are judged by the recogniser only when it hears nothing at all: one misheard word of three
# is already 33 %, and short takes are where tiny.en guesses most.
MIN_UNITS_FOR_ERROR_RATE = 4
# A phrase of this many words heard more often than the text says it: the model looped ("a phrase repeated").
REPEAT_PHRASE_WORDS = 3

# -- duration against the text's length ------------------------------------------------------------------------
# Speaking rates of the text's units (words for space-separated scripts, characters for Chinese/Japanese) that
# any sane take stays within: 1.2 to 5.5 words/s (slow reading to fast speech; conversational English is
# ~2.5-3) and 2 to 9 characters/s (Mandarin reads at ~4-5). Outside them a sentence was dropped or doubled,
# or the model babbled. ``speed`` scales both.
MIN_WORDS_PER_SECOND, MAX_WORDS_PER_SECOND = 1.2, 5.5
MIN_CHARACTERS_PER_SECOND, MAX_CHARACTERS_PER_SECOND = 2.0, 9.0
DURATION_SLACK_S = 0.6  # leading/trailing silence and a breath are not words: the bounds widen by this much
# The speech LM stops after at most this many speech tokens per text token (upstream's max_token_text_ratio), at
# 25 tokens per second of audio: a take longer than that cannot be the model speaking normally.
MAX_SPEECH_TOKENS_PER_TEXT_TOKEN = 20
# Once a voice has spoken this many passing takes, its own rate (seconds per unit) narrows the bounds to this
# factor either side of it: a slow voice is not flagged for being slow, a fast one is caught dropping a clause.
LEARNED_AFTER_TAKES = 3
LEARNED_RATE_FACTOR = 1.8

# -- the signal itself ------------------------------------------------------------------------------------------
FRAME_S = 0.02  # 20 ms analysis frames: shorter than a syllable, longer than a pitch period
SILENT_PEAK = 1e-3  # -60 dBFS peak: the take holds no sound at all (sound.limits uses the same floor)
QUIET_FRAME_DB = 40.0  # a frame this far under the take's loud frames is silence between words
# A pause inside a take longer than this is a hole, not a comma: CosyVoice's own pauses at punctuation and
# breaths stay under ~0.8 s; the reported faults (a sentence skipped as silence) run for seconds.
MAX_INNER_SILENCE_S = 1.5
# The take's last 30 ms still this loud, relative to its loud frames, means it stopped mid-sound (a truncated
# ending): speech ends with decaying energy, and every model here ends a sentence with a little silence.
END_WINDOW_S = 0.03
MAX_END_LOUDNESS = 0.35
# Speech is harmonic: its median spectral flatness sits at 0.05-0.3; white or random-weight noise at 0.5-0.9.
MAX_SPEECH_FLATNESS = 0.45
# A stretch of at least this long whose spectra come back almost identical later in the take: a looped copy. The
# similarity is the cosine of mean-removed 32-band log spectra over 60 ms; a copy that starts off a frame's edge
# still scores ~0.95, different words of the same voice stay under ~0.85.
REPEAT_MIN_S = 0.8
REPEAT_SIMILARITY = 0.93
REPEAT_WINDOW_AGREEMENT = 0.85  # of a window's frame pairs: a copy's frames sit off the original's, some miss

# A word's sound starts and ends where its frames rise this far under the take's loud frames: deeper than a
# word's own dips (stops, fricatives' onsets), shallower than the room between words.
WORD_EDGE_DB = 35.0

# -- retakes ---------------------------------------------------------------------------------------------------
# Each retake samples with a seed this far from the last one (a prime: never the seed of a neighbouring sentence,
# which samples with seed + index).
RETAKE_SEED_STRIDE = 100_003
