"""What the take was asked to say against what the recogniser heard: one normalisation for both sides, the
text's units (words, or characters for Chinese/Japanese), the error rate between them and phrases heard more
often than written. Torch-free."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

from cosyvoice_mac.frontend.special_tokens import ALL_SPECIAL_TOKENS

_MARKUP = re.compile("|".join(re.escape(token) for token in sorted(ALL_SPECIAL_TOKENS, key=len, reverse=True)))
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_NOT_WORD = re.compile(r"[^\w']+")
_DIGIT_GROUPS = re.compile(r"(?<=\d),(?=\d{3}\b)")  # "1,000" is one number, not 1 and 000
_EDGE_APOSTROPHES = re.compile(r"(?<!\w)'|'(?!\w)")
CHARACTER_LANGUAGES = ("zh", "ja")  # scripts written without spaces: compared character by character


def language_of(text: str) -> str | None:
    """``"zh"``, ``"ja"``, ``"en"`` (plain ASCII letters), or None for another language the text does not name."""
    if _KANA.search(text):
        return "ja"
    if _HAN.search(text):
        return "zh"
    letters = [char for char in _MARKUP.sub(" ", text) if char.isalpha()]
    return "en" if letters and all(char.isascii() for char in letters) else None


def normalise(text: str) -> str:
    """The one normalisation both sides get: markup dropped, NFKC, lower case, punctuation and hyphens as
    spaces (apostrophes inside words kept: "don't"), runs of spaces as one."""
    text = unicodedata.normalize("NFKC", _MARKUP.sub(" ", text)).lower().replace("’", "'")
    text = _EDGE_APOSTROPHES.sub(" ", _NOT_WORD.sub(" ", text).replace("_", " "))
    return " ".join(text.split())


def units(text: str, language: str | None) -> list[str]:
    """The text's units after :func:`normalise`: characters for Chinese/Japanese, else words (digits spelled out as
    the text front end spells them, so "3" heard matches the "three" the model was given)."""
    if language in CHARACTER_LANGUAGES:
        return [char for char in normalise(text) if not char.isspace()]
    return normalise(spell_digits(normalise(_DIGIT_GROUPS.sub("", text)))).split()


_spelling = None


def spell_digits(text: str) -> str:
    """Each run of digits as English words (inflect's ``number_to_words``, the front end's own reading)."""
    if not any(char.isdecimal() for char in text):
        return text
    global _spelling
    if _spelling is None:
        import inflect  # ~2 s to import: only once a number appears

        _spelling = inflect.engine()

    def words(match: re.Match) -> str:
        try:
            return _spelling.number_to_words(match.group())
        except Exception:  # inflect refuses very long digit runs: read them digit by digit
            return " ".join(_spelling.number_to_words(digit) for digit in match.group())

    return re.sub(r"\d+", words, text)


def edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    """Levenshtein distance between two unit lists (substitution, insertion and deletion each cost one)."""
    row = list(range(len(hypothesis) + 1))
    for i, ref_unit in enumerate(reference, 1):
        diagonal, row[0] = row[0], i
        for j, hyp_unit in enumerate(hypothesis, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (ref_unit != hyp_unit))
    return row[-1]


def error_rate(reference: str, hypothesis: str, language: str | None) -> float:
    """Word error rate (character error rate for Chinese/Japanese) of ``hypothesis`` against ``reference``."""
    ref, hyp = units(reference, language), units(hypothesis, language)
    return edit_distance(ref, hyp) / max(1, len(ref))


def says_a_phrase_twice(text: str, language: str | None, length: int) -> bool:
    """Whether ``text`` itself repeats a phrase of ``length`` units (a refrain, a repeated line): its take then
    holds a repeated stretch by right."""
    return bool(repeated_phrases("", text, language, length))


def repeated_phrases(reference: str, hypothesis: str, language: str | None, length: int) -> list[str]:
    """Phrases of ``length`` units the recogniser heard more often than the text says them (a looped model)."""
    if language in CHARACTER_LANGUAGES:
        length *= 2  # two characters make about one word
    joiner = "" if language in CHARACTER_LANGUAGES else " "

    def phrases(text: str) -> Counter:
        found = units(text, language)
        return Counter(joiner.join(found[i : i + length]) for i in range(len(found) - length + 1))

    written, heard = phrases(reference), phrases(hypothesis)
    return [phrase for phrase, count in heard.items() if count > max(1, written[phrase])]
