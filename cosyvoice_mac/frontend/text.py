"""Text the user types -> normalised sentences (markup checks and mode formatting: markup.py).

:class:`TextNormalizer` follows upstream ``CosyVoiceFrontEnd.text_normalize`` on its wetext path (spec 4.1):
Chinese (any char in U+4E00-U+9FFF) -> wetext zh + punctuation/blank rules, split by characters; otherwise
wetext en + digits spelled out with inflect, split by tokenizer tokens. Deliberate differences from upstream,
none of which changes an input upstream handles correctly:

* special tokens (``[breath]``, ``<strong>``, ``[AY0]``, ``[h][ào]`` ...) are opaque to normalisation
  (upstream turns ``[AY0]`` into ``[AYzero]`` or crashes wetext);
* runs of whitespace are collapsed before wetext en, and a failing wetext call keeps the text unnormalised
  (upstream raises for ``"a  b"``);
* the backslash escapes wetext adds (``"`` -> ``\\"``) are removed; only decimal digits are spelled out
  (upstream reads ``²`` as "zero"); numbers too long for inflect are read digit by digit;
* texts over ``LONG_TEXT_CHARS`` are normalised in sentence-aligned chunks (wetext is super-linear), and a
  sentence longer than ``4 * token_max_n`` without a terminator is cut at commas / spaces;
* empty or whitespace-only input gives ``[]`` (upstream ``[""]``).

Speed: wetext costs about 0.05 ms per English character (0.1 ms for Chinese with numbers, nearly nothing for
Chinese without digits), so a 100 000-character English text takes 5-10 s to normalise in full;
:meth:`TextNormalizer.iter_segments` yields the first segment after its first chunk (tens of ms).
"""

from __future__ import annotations

import logging
import re
from typing import Callable, Iterable, Iterator

import regex

from cosyvoice_mac.frontend.special_tokens import ALL_SPECIAL_TOKENS

logger = logging.getLogger(__name__)

ZH_TERMINATORS = frozenset("。？！；：、.?!;")
EN_TERMINATORS = frozenset(".?!;:")
CLOSING_QUOTES = frozenset('"”')
LONG_TEXT_CHARS = 800  # above this, wetext runs per chunk of about WETEXT_CHUNK_CHARS
WETEXT_CHUNK_CHARS = 300

_HAN = re.compile(r"[\u4e00-\u9fff]")
# Upstream drops pieces of only punctuation/symbols; we also count blanks among them, since " ,." has
# nothing to say either (upstream would send it to the model and get noise).
_ONLY_PUNCTUATION = regex.compile(r"[\p{P}\p{S}\s]*")
_PLACEHOLDER_BASE = 0xE000  # private-use chars stand in for special tokens while normalising
_PLACEHOLDERS = re.compile(f"[{chr(_PLACEHOLDER_BASE)}-{chr(_PLACEHOLDER_BASE + len(ALL_SPECIAL_TOKENS) - 1)}]")
_TOKEN_INDEX = {token: i for i, token in enumerate(ALL_SPECIAL_TOKENS)}
_ANY_SPECIAL = re.compile("|".join(re.escape(t) for t in sorted(ALL_SPECIAL_TOKENS, key=len, reverse=True)))
_WETEXT_ESCAPE = re.compile(r'\\(["\\])')
_CHUNK_BOUNDARY = re.compile(r"(?<=[。！？；!?;\n])|(?<=\.)(?=\s)")


def contains_chinese(text: str) -> bool:
    """Upstream's language test: any CJK unified ideograph (U+4E00-U+9FFF) makes the text Chinese."""
    return _HAN.search(text) is not None


def detect_language(text: str) -> str:
    """``"zh"`` or ``"en"`` (everything without Han characters takes the English path, kana included)."""
    return "zh" if contains_chinese(text) else "en"


def is_only_punctuation(text: str) -> bool:
    return _ONLY_PUNCTUATION.fullmatch(text) is not None


def _protect(text: str) -> str:
    text = _PLACEHOLDERS.sub("", text)  # stray private-use chars would otherwise turn into tokens
    return _ANY_SPECIAL.sub(lambda m: chr(_PLACEHOLDER_BASE + _TOKEN_INDEX[m.group()]), text)


def _restore(text: str) -> str:
    return _PLACEHOLDERS.sub(lambda m: ALL_SPECIAL_TOKENS[ord(m.group()) - _PLACEHOLDER_BASE], text)


class TextNormalizer:
    """Owns the wetext zh/en normalisers and inflect (loaded on first use) and the split settings.

    ``count_tokens(text)`` measures English segment length (upstream: the model's text tokenizer, special
    tokens included), e.g. ``lambda s: len(tokenizer.encode(s))``.
    """

    def __init__(
        self, count_tokens: Callable[[str], int], token_max_n: int = 80, token_min_n: int = 60, merge_len: int = 20
    ):
        self.count_tokens = count_tokens
        self.token_max_n, self.token_min_n, self.merge_len = token_max_n, token_min_n, merge_len
        self._zh = self._en = self._inflect = None

    def normalize(self, text: str, split: bool = True) -> list[str]:
        """Normalised segments to synthesise one by one (``split=True``), or ``[whole normalised text]``.

        Text containing both ``<|`` and ``|>`` is returned unchanged (upstream disables the frontend then).
        Segments made only of punctuation are dropped; nothing to say gives ``[]``.
        """
        if not text.strip():
            return []
        if "<|" in text and "|>" in text:
            return [text]
        if split:
            return list(self.iter_segments(text))
        normalized = "".join(self._normalized_chunks(text))
        return [normalized] if normalized else []

    def iter_segments(self, text: str) -> Iterator[str]:
        """Same segments as ``normalize(text)``, produced lazily: a long text's first segment comes at once."""
        if not text.strip():
            return
        if "<|" in text and "|>" in text:
            yield text
            return
        lang = detect_language(text)
        for segment in self._merge(self._pieces(self._normalized_chunks(text), lang), lang):
            if not is_only_punctuation(segment):
                yield segment

    def split(self, normalized: str, lang: str) -> list[str]:
        """Upstream ``split_paragraph`` alone, on already-normalised text (``lang`` "zh" or "en")."""
        return list(self._merge(self._pieces([normalized], lang), lang))

    def measure(self, text: str, lang: str) -> int:
        """Segment length: characters for Chinese, tokenizer tokens otherwise."""
        return len(text) if lang == "zh" else self.count_tokens(text)

    # -- normalisation ---------------------------------------------------------------------------------

    def _normalized_chunks(self, text: str) -> Iterator[str]:
        protected = _protect(text.strip())
        lang = detect_language(protected)
        if lang == "en":
            protected = re.sub(r"\s{2,}", " ", protected)  # wetext en asserts on whitespace runs
        if len(protected) <= LONG_TEXT_CHARS:
            chunks, whole = [protected], True
        else:
            chunks, whole = _sentence_chunks(protected), False
        for index, chunk in enumerate(chunks):
            normalized = self._wetext(lang, chunk) if whole else self._wetext_keep_edges(lang, chunk)
            if lang == "zh":
                yield _chinese_rules(_restore(normalized), final=index == len(chunks) - 1)
            else:
                yield _restore(self._spell_out_numbers(normalized))

    def _wetext_keep_edges(self, lang: str, chunk: str) -> str:
        core = chunk.strip()
        lead, trail = chunk[: len(chunk) - len(chunk.lstrip())], chunk[len(chunk.rstrip()) :]
        if not core:
            return chunk if lang == "zh" else " " * bool(chunk)
        if lang == "en":  # wetext en maps a lone newline/tab to a space
            lead, trail = " " * bool(lead), " " * bool(trail)
        return lead + self._wetext(lang, core) + trail

    def _wetext(self, lang: str, text: str) -> str:
        if self._zh is None:
            from wetext import Normalizer  # ~0.4 s import, bundled FSTs (no network)

            self._zh, self._en = Normalizer(remove_erhua=False), Normalizer()
        try:
            out = (self._zh if lang == "zh" else self._en).normalize(text)
        except Exception as error:  # wetext raises AssertionError/RuntimeError on inputs it cannot parse
            if _PLACEHOLDERS.search(text):  # retry on the prose between the special tokens
                parts = re.split(f"({_PLACEHOLDERS.pattern})", text)
                return "".join(p if _PLACEHOLDERS.fullmatch(p) else self._wetext_keep_edges(lang, p) for p in parts)
            logger.warning(
                "text normalisation failed (%s: %s); using the text as typed: %.60r", type(error).__name__, error, text
            )
            return text
        return _WETEXT_ESCAPE.sub(r"\1", out)

    def _spell_out_numbers(self, text: str) -> str:
        if not any(c.isdecimal() for c in text):
            return text
        if self._inflect is None:
            import inflect  # ~2 s import (typeguard), so only when a number appears

            self._inflect = inflect.engine()
        return re.sub(r"\d+", lambda m: self._number_words(m.group()), text)

    def _number_words(self, digits: str) -> str:
        try:
            return self._inflect.number_to_words(digits)
        except Exception:  # inflect.NumOutOfRangeError for very long digit runs
            return " ".join(self._inflect.number_to_words(d) for d in digits)

    # -- splitting (upstream split_paragraph, fed chunk by chunk) ----------------------------------------

    def _pieces(self, chunks: Iterable[str], lang: str) -> Iterator[str]:
        """Sentences cut after terminators; a cut waits for the next chunk when the terminator ends the buffer."""
        buffer, run_on = "", False
        for chunk in chunks:
            pieces, buffer = _cut_after_terminators(buffer + chunk, lang, final=False)
            yield from self._limit_length(pieces, lang, run_on)
            run_on = run_on and not pieces
            if self.measure(buffer, lang) > 4 * self.token_max_n:  # run-on text: do not wait for a terminator
                *complete, buffer = self._cut_overlong(buffer, lang)
                yield from complete
                run_on = True
        if buffer:
            yield from self._limit_length(_cut_after_terminators(buffer, lang, final=True)[0], lang, run_on)

    def _limit_length(self, pieces: list[str], lang: str, run_on: bool) -> Iterator[str]:
        """Overlong sentences (and the rest of a run-on sentence already being cut) go to ``_cut_overlong``."""
        for index, piece in enumerate(pieces):
            if (run_on and index == 0) or self.measure(piece, lang) > 4 * self.token_max_n:
                yield from self._cut_overlong(piece, lang)
            else:
                yield piece

    def _merge(self, pieces: Iterable[str], lang: str) -> Iterator[str]:
        """Greedy merge to token_min_n..token_max_n; a short tail joins the previous segment (held back)."""
        held, current = None, ""
        for piece in pieces:
            if (
                self.measure(current + piece, lang) > self.token_max_n
                and self.measure(current, lang) > self.token_min_n
            ):
                if held is not None:
                    yield held
                held, current = current, ""
            current += piece
        if current:
            if held is not None and self.measure(current, lang) < self.merge_len:
                held += current
            else:
                if held is not None:
                    yield held
                held = current
        if held is not None:
            yield held

    def _cut_overlong(self, piece: str, lang: str) -> list[str]:
        """Small pieces (at commas, else spaces, else fixed character windows) for the greedy merge to regroup."""
        limit = self.token_max_n
        window = limit if lang == "zh" else limit // 4  # a char is at most 4 byte-level tokens
        out = []
        for part in filter(None, re.split(r"(?<=[，,、])", piece)):
            if self.measure(part, lang) <= limit:
                out.append(part)
                continue
            for word in filter(None, re.split(r"(?<=\s)", part)):
                if self.measure(word, lang) <= limit:
                    out.append(word)
                else:
                    out.extend(word[i : i + window] for i in range(0, len(word), window))
        return out


def _chinese_rules(text: str, final: bool) -> str:
    """Upstream's Chinese clean-up after wetext (the trailing-comma rule only applies to the end of the text)."""
    text = _remove_blanks(text.replace("\n", "")).replace("²", "平方").replace("³", "立方")
    text = text.replace(".", "。").replace(" - ", "，")
    for bracket in ("（", "）", "【", "】", "`"):
        text = text.replace(bracket, "")
    text = text.replace("——", " ")
    return re.sub(r"[，,、]+$", "。", text) if final else text


def _cut_after_terminators(text: str, lang: str, final: bool) -> tuple[list[str], str]:
    """Pieces ending at a terminator (+ closing quote) and the unfinished rest; ``final`` closes the text."""
    terminators = ZH_TERMINATORS if lang == "zh" else EN_TERMINATORS
    if final and text and text[-1] not in terminators:
        text += "。" if lang == "zh" else "."
    end = len(text)
    if not final:  # a trailing run of terminators/quotes may still get a closing quote from the next chunk
        while end and (text[end - 1] in terminators or text[end - 1] in CLOSING_QUOTES):
            end -= 1
    pieces, start = [], 0
    for i in range(end):
        if text[i] not in terminators:
            continue
        if i > start:  # like upstream, a terminator right after another one is dropped
            pieces.append(text[start : i + 1])
        if i + 1 < len(text) and text[i + 1] in CLOSING_QUOTES:
            if pieces:
                pieces[-1] += text[i + 1]
            start = i + 2
        else:
            start = i + 1
    return pieces, text[start:]


def _remove_blanks(text: str) -> str:
    """Drop spaces except those between two ASCII non-space characters (upstream ``replace_blank``)."""

    def ascii_word_char(i: int) -> bool:
        return 0 <= i < len(text) and text[i].isascii() and text[i] != " "

    return "".join(c for i, c in enumerate(text) if c != " " or (ascii_word_char(i + 1) and ascii_word_char(i - 1)))


def _sentence_chunks(text: str) -> list[str]:
    """Consecutive sentence-aligned pieces of about WETEXT_CHUNK_CHARS (hard cut at 3x for run-on text)."""
    chunks, current = [], ""
    for sentence in _CHUNK_BOUNDARY.split(text):
        while len(sentence) > 3 * WETEXT_CHUNK_CHARS:
            cut = _soft_cut(sentence, 3 * WETEXT_CHUNK_CHARS)
            chunks.append(current + sentence[:cut])
            current, sentence = "", sentence[cut:]
        current += sentence
        if len(current) >= WETEXT_CHUNK_CHARS:
            chunks.append(current)
            current = ""
    return chunks + ([current] if current else [])


def _soft_cut(text: str, limit: int) -> int:
    """Cut position <= limit after the last space/comma in the second half, else between two non-digits."""
    window = text[limit // 2 : limit]
    for separators in (" \t", "，,、"):
        best = max(window.rfind(s) for s in separators)
        if best >= 0:
            return limit // 2 + best + 1
    cut = limit
    while cut > limit // 2 and (text[cut - 1].isalnum() and text[cut].isalnum() and text[cut].isascii()):
        cut -= 1
    return cut
