"""Behaviour of the text frontend beyond the golden vectors: markup, ids, errors, long input, mode strings."""

from __future__ import annotations

import re
import socket
import time
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.frontend.markup import (
    LlmText,
    build_llm_text,
    find_unknown_markup,
    format_instruction,
    validate_markup,
)
from cosyvoice_mac.frontend.special_tokens import (
    ARPABET_PHONES,
    INSTRUCTIONS,
    PINYIN_UNITS,
    SPECIAL_TOKENS,
)
from cosyvoice_mac.frontend.text import TextNormalizer, contains_chinese, detect_language, is_only_punctuation
from cosyvoice_mac.frontend.tokenizer import SpeechTextTokenizer
from cosyvoice_mac.pipeline.types import SynthesisError
from cosyvoice_mac.versions import SYSTEM_PROMPT
from tests.parity.common import parity_dir
from tests.parity.text import write_vocab_merges_folder

BLANK_EN = parity_dir() / "cosyvoice3_tiny" / "CosyVoice-BlankEN"
pytestmark = pytest.mark.skipif(not BLANK_EN.is_dir(), reason="tiny parity tokenizer not available")


@pytest.fixture(scope="module")
def v2():
    return SpeechTextTokenizer.from_dir(BLANK_EN, "cosyvoice2")


@pytest.fixture(scope="module")
def v3():
    return SpeechTextTokenizer.from_dir(BLANK_EN, "cosyvoice3")


@pytest.fixture(scope="module")
def normalizer(v3):
    return TextNormalizer(lambda text: len(v3.encode(text)))


# ------------------------------------------------------------------------------------------- tokenizer


def test_v3_pinyin_and_arpabet_markup_become_their_special_ids(v3):
    assert v3.encode("[h][ào]") == [151763, 151854]
    assert v3.encode("[M][AY0][N][UW1][T]") == [151718, 151685, 151719, 151741, 151733]
    ids = v3.encode("对报道[j][ǐ]予")
    assert ids[ids.index(151797) : ids.index(151797) + 2] == [151797, 151913]


def test_special_token_id_layout_matches_upstream_order(v2, v3):
    assert len(SPECIAL_TOKENS["cosyvoice2"]) == 19 and len(ARPABET_PHONES) == 84 and len(PINYIN_UNITS) == 176
    for tokenizer in (v2, v3):
        assert tokenizer.encode("<|endofprompt|>[breath]<strong></strong>[mn]") == [
            151646,
            151647,
            151648,
            151649,
            151662,
        ]
    assert [v3.token_to_id(t) for t in ("<|endofsystem|>", "[AA]", "[ZH]", "[a]", "[ǜ]")] == [
        151663,
        151664,
        151747,
        151748,
        151923,
    ]
    assert len(v2) == 151663 and len(v3) == 151924
    assert v2.endofprompt_id == v3.endofprompt_id == 151646


def test_v2_does_not_know_v3_markup(v2):
    assert all(i < 151643 for i in v2.encode("[h][ào][AY0]"))
    with pytest.raises(SynthesisError, match="CosyVoice3") as error:
        validate_markup("我[h][ào]你", "cosyvoice2")
    assert "[h]" in str(error.value) and "[ào]" in str(error.value)
    with pytest.raises(SynthesisError, match="CosyVoice3"):
        validate_markup("a [M][AY0][N][UW1][T] ago", "cosyvoice2")
    validate_markup("我[h][ào]你 a [M][AY0][N][UW1][T] ago", "cosyvoice3")


def test_paralinguistic_tags_are_atomic_anywhere_and_keep_surrounding_spaces(v2, v3):
    for tokenizer in (v2, v3):
        ids = tokenizer.encode("He[breath]said <strong>x</strong>[laughter]")
        assert [ids.count(i) for i in (151647, 151648, 151649, 151651)] == [1, 1, 1, 1]
        assert tokenizer.encode(" [breath] ")[1] == 151647 and len(tokenizer.encode(" [breath] ")) == 3
        text = "He said [breath] <strong>great</strong>."
        assert tokenizer.decode(tokenizer.encode(text)) == text
        assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=True) == "He said  great."


def test_decomposed_pinyin_still_matches(v3):
    assert v3.encode(unicodedata.normalize("NFD", "[h][ào]")) == [151763, 151854]


def test_vocab_merges_folder_gives_identical_ids(tmp_path, v2, v3):
    folder = write_vocab_merges_folder(BLANK_EN / "tokenizer.json", tmp_path / "CosyVoice-BlankEN")
    texts = [
        "Hello world, it's 2024!\n\nNew  line\ttab",
        "收到好友从远方寄来的生日礼物。",
        "émoji 😀 ÅΩ",
        "You are a helpful assistant.<|endofprompt|>[h][ào] [M][AY0] <|im_start|>x<|im_end|><|endoftext|>",
    ]
    for version, reference in (("cosyvoice2", v2), ("cosyvoice3", v3)):
        rebuilt = SpeechTextTokenizer.from_dir(folder, version)
        assert len(rebuilt) == len(reference)
        for text in texts:
            assert rebuilt.encode(text) == reference.encode(text), text


def test_tokenizer_folder_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        SpeechTextTokenizer.from_dir(tmp_path / "missing", "cosyvoice3")
    with pytest.raises(ConfigError, match="unknown tokenizer version"):
        SpeechTextTokenizer.from_dir(BLANK_EN, "cosyvoice1")
    with pytest.raises(ConfigError, match="merges.txt"):
        (tmp_path / "vocab.json").write_text("{}")
        SpeechTextTokenizer.from_dir(tmp_path, "cosyvoice2")
    folder = write_vocab_merges_folder(BLANK_EN / "tokenizer.json", tmp_path / "no_config")
    (folder / "tokenizer_config.json").unlink()  # sparse tiny vocab: Qwen specials would land at 599...
    with pytest.raises(ConfigError, match="151646"):
        SpeechTextTokenizer.from_dir(folder, "cosyvoice2")


# ------------------------------------------------------------------------------------------ markup


def test_unknown_markup_is_reported_with_positions_and_sources():
    with pytest.raises(SynthesisError) as error:
        validate_markup("Hi [zz][qq] there", "cosyvoice3")
    message = str(error.value)
    assert "[zz] at character 3" in message and "[qq] at character 7" in message
    assert "PINYIN_UNITS" in message and "[breath]" in message
    assert find_unknown_markup("[laugh] ok <em>x</em> <|zh|>", "cosyvoice3") == [
        (0, "[laugh]"),
        (11, "<em>"),
        (16, "</em>"),
        (22, "<|zh|>"),
    ]
    with pytest.raises(SynthesisError, match=r"did you mean \[laughter\]"):
        validate_markup("so funny [laugh]", "cosyvoice2")


@pytest.mark.parametrize(
    "prose",
    [
        "See [1] and [2][3].",
        "[citation needed]",
        "[Editor's note: fine]",
        "option [B] or [NOTE]",
        "(a) [?] [...]",
        "x < y > z",
        "He said [laughter] and <strong>this</strong> <laughter>ha</laughter>.",
    ],
)
def test_prose_brackets_and_known_tags_are_accepted(prose):
    validate_markup(prose, "cosyvoice2")
    validate_markup(prose, "cosyvoice3")


def test_reserved_and_version_specific_pipe_tags():
    validate_markup("You are a helpful assistant.<|endofprompt|>hi", "cosyvoice2")
    validate_markup("<|endofsystem|>", "cosyvoice3")
    for text in ("<|endofsystem|>", "<|im_start|>", "<|endoftext|>"):
        with pytest.raises(SynthesisError):
            validate_markup(text, "cosyvoice2")


# ------------------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize("text", ["", "   \n\t", "!!!", "……", "?!.", "«»"])
def test_nothing_to_say_gives_no_segments(normalizer, text):
    assert normalizer.normalize(text) == []
    assert list(normalizer.iter_segments(text)) == []


def test_language_detection():
    assert contains_chinese("价格 abc") and detect_language("abc 中") == "zh"
    assert detect_language("Hello 123") == "en" and detect_language("カタカナ テスト") == "en"
    assert detect_language("한국어") == "en"


def test_markup_survives_normalisation(normalizer):
    assert normalizer.normalize("I mean a [M][AY0][N][UW1][T] thing, 3 of them.") == [
        "I mean a [M][AY0][N][UW1][T] thing, three of them."
    ]
    assert normalizer.normalize("高管对报道[j][ǐ]予好评，[breath]价格是123元") == [
        "高管对报道[j][ǐ]予好评，[breath]价格是一百二十三元。"
    ]
    assert normalizer.normalize("[mn]1st [quick_breath]2nd", split=False) == ["[mn]first [quick_breath]second"]


def test_inputs_that_crash_wetext_or_get_escaped(normalizer):
    assert normalizer.normalize("a  b\n\nc 12.") == ["a b c twelve."]
    assert normalizer.normalize('He said "hi" twice.') == ['He said "hi" twice.']
    assert normalizer.normalize("x² is " + "9" * 40)[0].startswith("x² is nine nine")


def test_long_input_is_split_quickly(normalizer):
    chinese = ("收到好友从远方寄来的生日礼物，那份意外的惊喜让我心中充满了快乐" * 4000)[:100_000]
    started = time.perf_counter()
    segments = normalizer.normalize(chinese)
    assert time.perf_counter() - started < 20.0  # generous: a quadratic split takes minutes
    assert "".join(segments) == chinese + "。" and max(map(len, segments)) <= 2 * 80

    english = ("The quick brown fox jumps over the lazy dog, twice. " * 2000)[:100_000]
    started = time.perf_counter()
    segments = normalizer.split(english, "en")
    assert time.perf_counter() - started < 20.0  # generous: a quadratic split takes minutes
    assert "".join(segments) == (english if english[-1] in ".?!;:" else english + ".")
    assert max(normalizer.measure(s, "en") for s in segments) <= 2 * 80

    started = time.perf_counter()
    first = next(normalizer.iter_segments(english + " " + "word " * 5000))
    assert time.perf_counter() - started < 15.0 and first.startswith("The quick brown fox")


def test_run_on_text_without_terminators_is_cut(normalizer):
    segments = normalizer.normalize("中" * 5000)
    assert all(len(s) <= 2 * 80 for s in segments) and "".join(segments) == "中" * 5000 + "。"
    words = normalizer.split("word " * 3000, "en")
    assert max(normalizer.measure(s, "en") for s in words) <= 2 * 80


def test_normalisation_needs_no_network(normalizer, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    fresh = TextNormalizer(len)
    assert fresh.normalize("气温25.5度") == ["气温二十五点五度。"]
    assert fresh.normalize("Dr. Smith at 10:30 am.") == ["doctor Smith at ten thirty AM."]


# ---------------------------------------------------------------------------------- mode formatting


def test_llm_text_per_mode_and_version(v3):
    prefix = "You are a helpful assistant.<|endofprompt|>"
    assert build_llm_text("zero_shot", "cosyvoice3", "Hi.", prompt_transcript="Hello.") == (
        build_llm_text("zero_shot", "cosyvoice3", "Hi.", prompt_transcript=prefix + "Hello.")
    )
    assert build_llm_text("zero_shot", "cosyvoice3", "Hi.", "Hello.").prompt_text == prefix + "Hello."
    assert build_llm_text("zero_shot", "cosyvoice2", "Hi.", "Hello.").prompt_text == "Hello."
    assert build_llm_text("cross_lingual", "cosyvoice3", "Hi.").text == prefix + "Hi."
    assert build_llm_text("cross_lingual", "cosyvoice2", "Hi.") == LlmText("", "Hi.")
    assert build_llm_text("cross_lingual", "cosyvoice3", prefix + "Hi.").text == prefix + "Hi."
    instruct = build_llm_text("instruct", "cosyvoice3", "好。", instruction="请用广东话表达。")
    assert instruct.prompt_text == "You are a helpful assistant. 请用广东话表达。<|endofprompt|>"
    assert build_llm_text("instruct", "cosyvoice2", "好。", instruction="用四川话说这句话").prompt_text == (
        "用四川话说这句话<|endofprompt|>"
    )
    for mode in ("zero_shot", "cross_lingual", "instruct"):
        parts = build_llm_text(mode, "cosyvoice3", "Hi.", "Hello.", "Speak slowly.")
        assert 151646 in v3.encode(parts.prompt_text + parts.text)


def test_instruction_presets_format_like_training():
    assert len(INSTRUCTIONS) == 26
    assert format_instruction(INSTRUCTIONS[0].text, "cosyvoice3") == (
        "You are a helpful assistant. 请用广东话表达。<|endofprompt|>"
    )
    assert format_instruction(f"{SYSTEM_PROMPT} Say it loudly.", "cosyvoice3") == (
        f"{SYSTEM_PROMPT} Say it loudly.<|endofprompt|>"
    )
    assert len({p.label for p in INSTRUCTIONS}) == len({p.text for p in INSTRUCTIONS}) == 26


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("zero_shot", "cosyvoice3", "Hi."), "transcript"),
        (("instruct", "cosyvoice3", "Hi.", "", "  "), "instruction"),
        (("cross_lingual", "cosyvoice3", "  "), "empty"),
        (("sing", "cosyvoice3", "Hi."), "unknown mode"),
        (("zero_shot", "cosyvoice1", "Hi.", "Hello."), "unknown model version"),
    ],
)
def test_llm_text_errors(args, match):
    with pytest.raises(SynthesisError, match=match):
        build_llm_text(*args)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(list("中文好的我们") + list('。？！；：、?!;"”，')), min_size=801, max_size=2500))
def test_long_text_chunked_normalisation_splits_like_the_whole_text(normalizer, chars):
    """Digit-free Chinese passes wetext unchanged, so chunked normalising must equal one upstream split."""
    text = "".join(chars).lstrip('"”')
    whole = re.sub(r"[，,、]+$", "。", text)
    expected = [s for s in normalizer.split(whole, "zh") if not is_only_punctuation(s)]
    assert normalizer.normalize(text) == expected
