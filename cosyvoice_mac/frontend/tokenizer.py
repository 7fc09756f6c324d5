"""Text -> LLM token ids: BlankEN's Qwen2 byte-level BPE plus the CosyVoice special tokens.

Behaves like upstream ``CosyVoice2Tokenizer`` / ``CosyVoice3Tokenizer`` (``AutoTokenizer.from_pretrained`` of
``CosyVoice-BlankEN`` followed by ``add_special_tokens``): no BOS/EOS is added, and every special token is
matched literally anywhere in the text (longest match first) and becomes one id, never split by BPE and
never stripping the spaces around it.

Two folder layouts are supported:

* ``tokenizer.json`` (what ``tokenizers`` / transformers save; the tiny parity folders have only this);
* ``vocab.json`` + ``merges.txt`` (+ ``tokenizer_config.json``), the layout of the released BlankEN folder.
  The fast tokenizer is then built the way transformers converts a slow ``Qwen2Tokenizer``: NFC normaliser,
  the Qwen2 split regex (isolated) then byte-level mapping, BPE without unk/dropout, byte-level decoder.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.frontend.special_tokens import ENDOFPROMPT_ID, SPECIAL_TOKENS
from cosyvoice_mac.versions import ENDOFPROMPT, VERSIONS

# Qwen2's pre-tokenisation regex (transformers ``tokenization_qwen2.PRETOKENIZE_REGEX``).
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2's own added tokens, used when tokenizer_config.json does not list them.
QWEN2_BASE_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _special(content: str) -> AddedToken:
    # Same flags transformers gives special tokens: matched on raw text, no whitespace stripping.
    return AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)


def _read_merges(path: Path) -> list[tuple[str, str]]:
    merges = []
    for line_number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ConfigError(f"{path}:{line_number}: expected two space-separated symbols, got {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def _build_from_vocab_and_merges(folder: Path) -> Tokenizer:
    vocab_path, merges_path = folder / "vocab.json", folder / "merges.txt"
    missing = [p.name for p in (vocab_path, merges_path) if not p.is_file()]
    if missing:
        raise ConfigError(
            f"{folder}: no tokenizer.json and missing {', '.join(missing)}; a CosyVoice-BlankEN folder needs "
            "either tokenizer.json or vocab.json + merges.txt (re-download the model folder)"
        )
    try:
        vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ConfigError(f"{vocab_path}: not valid JSON ({error}); re-download the model folder") from error
    base_added = _base_added_tokens(folder, vocab)
    # Qwen2's own specials get their configured ids by living in the model vocabulary (no merge can reach
    # them, so BPE never produces them); ``tokenizers`` would otherwise renumber them.
    for token_id, content in base_added:
        vocab.setdefault(content, token_id)
    bpe = models.BPE(
        vocab=vocab, merges=_read_merges(merges_path), dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False
    )
    tokenizer = Tokenizer(bpe)
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([_special(content) for _, content in base_added])
    return tokenizer


def _base_added_tokens(folder: Path, vocab: dict[str, int]) -> list[tuple[int, str]]:
    """Qwen2's own special tokens and their ids: tokenizer_config.json ``added_tokens_decoder``, else the
    three Qwen2 defaults (reusing vocabulary ids when present, otherwise appended after the vocabulary)."""
    config_path = folder / "tokenizer_config.json"
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ConfigError(f"{config_path}: not valid JSON ({error}); re-download the model folder") from error
        decoder = config.get("added_tokens_decoder") or {}
        if decoder:
            return sorted((int(i), entry["content"]) for i, entry in decoder.items())
    next_id = max(vocab.values(), default=-1) + 1
    found = []
    for content in QWEN2_BASE_SPECIALS:
        if content not in vocab:
            vocab[content] = next_id
            next_id += 1
        found.append((vocab[content], content))
    return found


class SpeechTextTokenizer:
    """Owns one ``tokenizers.Tokenizer`` with the CosyVoice special tokens of ``version`` added at fixed ids.

    Use :meth:`from_dir`. ``special_token_ids`` maps every token of the upstream list (including the two
    Qwen chat tokens that already existed) to its id.
    """

    def __init__(self, tokenizer: Tokenizer, version: str, special_token_ids: dict[str, int]):
        self._tokenizer = tokenizer
        self.version = version
        self.special_token_ids = dict(special_token_ids)
        self._size = max(self._tokenizer.get_vocab(with_added_tokens=True).values()) + 1

    @classmethod
    def from_dir(cls, blank_en_dir: str | Path, version: str = "cosyvoice2") -> "SpeechTextTokenizer":
        """Load ``<model_dir>/CosyVoice-BlankEN`` and add the special tokens of ``version``.

        Raises ConfigError for a missing folder / files, an unknown version, or a vocabulary whose ids would
        not put ``<|endofprompt|>`` at 151646 (the LLM's embedding rows are tied to those ids).
        """
        if version not in VERSIONS:
            raise ConfigError(f"unknown tokenizer version {version!r}; expected one of {VERSIONS}")
        folder = Path(blank_en_dir)
        if not folder.is_dir():
            raise ConfigError(f"tokenizer folder {folder} does not exist; expected <model_dir>/CosyVoice-BlankEN")
        json_path = folder / "tokenizer.json"
        if json_path.is_file():
            try:
                base = Tokenizer.from_file(str(json_path))
            except Exception as error:  # tokenizers raises a bare Exception for unreadable files
                raise ConfigError(f"{json_path}: cannot be read ({error}); re-download the model folder") from error
        else:
            base = _build_from_vocab_and_merges(folder)
        tokenizer, ids = _add_special_tokens(base, SPECIAL_TOKENS[version], folder)
        return cls(tokenizer, version, ids)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (NFC-normalised first so decomposed pinyin markup still matches); no BOS/EOS."""
        return self._tokenizer.encode(unicodedata.normalize("NFC", text), add_special_tokens=False).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tokenizer.id_to_token(int(token_id))

    @property
    def endofprompt_id(self) -> int:
        return self.special_token_ids[ENDOFPROMPT]

    def __len__(self) -> int:
        """Size of the id space (largest id + 1); equals ``len(AutoTokenizer)`` for the dense real vocabulary."""
        return self._size

    def __repr__(self) -> str:
        return f"SpeechTextTokenizer(version={self.version!r}, size={self._size})"


def _add_special_tokens(base: Tokenizer, tokens: tuple[str, ...], folder: Path) -> tuple[Tokenizer, dict[str, int]]:
    """Append ``tokens`` the way ``add_special_tokens`` does: keep those present, number the rest in list order."""
    known = base.get_vocab(with_added_tokens=True)
    next_id = max(known.values()) + 1
    expected: dict[str, int] = {}
    for content in tokens:
        if content not in known:
            known[content] = next_id
            next_id += 1
        expected[content] = known[content]
    if expected[ENDOFPROMPT] != ENDOFPROMPT_ID:
        raise ConfigError(
            f"{folder}: this vocabulary puts {ENDOFPROMPT} at id {expected[ENDOFPROMPT]}, but CosyVoice models "
            f"use {ENDOFPROMPT_ID} (BlankEN must end at id {ENDOFPROMPT_ID - 1}); use the CosyVoice-BlankEN "
            "folder shipped with the model"
        )
    base.add_special_tokens([_special(content) for content in tokens])
    wrong = {t: (i, base.token_to_id(t)) for t, i in expected.items() if base.token_to_id(t) != i}
    if wrong:
        raise ConfigError(f"{folder}: special tokens did not get their upstream ids (expected, got): {wrong}")
    return base, expected
