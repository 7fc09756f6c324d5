"""The table's rows for what one job asks for: the synthesis request's fields (page, ``/v1``, Gradio API, CLI,
Python) and the long-form fields (dialogue pause, dubbing speed limit, a batch's folder name), with the one rule
for a batch's folder name."""

from __future__ import annotations

import re

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.settings.setting import GRADIO, LONG_COMMANDS, PAGE, PYTHON, V1, Setting, cli

SPEECH_DOORS = (PAGE, V1, GRADIO, PYTHON)  # every door that speaks one request
MAX_SEED = 2**31 - 1  # sentence i samples with seed + i: stays a valid generator seed

FIELD_ROWS = (
    Setting(
        "speed",
        "speaking rate, 1 = natural (beyond this range the mel stretch audibly breaks the voice)",
        "语速，1 为自然语速（超出此范围声音会明显失真）",
        default=1.0,
        type=float,
        range=(0.5, 2.0),  # beyond this the mel stretch audibly breaks the voice
        step=0.05,
        flag="--speed",
        doors=(*SPEECH_DOORS, *cli("synth", "convert", "batch")),
        group="request",
    ),
    Setting(
        "seed",
        "sampling seed: the same seed and text give the same audio (none: a random one, recorded in the sidecar)",
        "采样种子：相同的种子和文本生成相同的音频（不填则随机，并记录在说明文件中）",
        type=int,
        range=(0, MAX_SEED),
        flag="--seed",
        doors=(*SPEECH_DOORS, *cli("synth", *LONG_COMMANDS)),
        group="request",
    ),
    Setting(
        "mode",
        "zero_shot (with the prompt's transcript), cross_lingual (without it) or instruct (with an instruction); "
        "derived from the fields given unless named",
        "zero_shot（提供提示音频的文本）、cross_lingual（不提供）或 instruct（提供指令）；未指定时按所填字段推断",
        choices=("zero_shot", "cross_lingual", "instruct"),
        doors=SPEECH_DOORS,
        group="request",
    ),
    Setting(
        "instruct",
        'an instruction, e.g. "speak sadly" or "用四川话说" (instruct mode)',
        '指令，如 "speak sadly" 或 "用四川话说"（指令模式）',
        flag="--instruct",
        doors=(*SPEECH_DOORS, *cli("synth")),
        group="request",
    ),
    Setting(
        "prompt_trim",
        "the part of a prompt recording that is used: off, the whole (one over the 30 s limit is refused); auto, the "
        "clearest 12 s of one over the limit (the span with the most speech, cut in pauses); START-END, that span in "
        "seconds, e.g. 12.5-24.5 (the page: a selection on the recording's waveform)",
        "使用提示录音的哪一部分：off 使用整段（超过 30 秒上限的会被拒绝）；auto 对超过上限的录音保留最清晰的 12 秒"
        "（语音最多的一段，在停顿处切开）；START-END 使用该时间段（秒），如 12.5-24.5（网页上：在录音波形上拖动选区）",
        default="off",
        flag="--prompt-trim",
        metavar="off|auto|START-END",
        doors=(PAGE, V1, *cli("synth")),
        group="request",
    ),
    Setting(
        "stream",
        "synthesise in chunks: the first audio comes sooner (prints time to first audio)",
        "分段合成：更快听到第一段音频（并显示首段音频的耗时）",
        default=False,
        type=bool,
        flag="--stream",
        doors=(*SPEECH_DOORS, *cli("synth", "convert")),
        group="request",
    ),
    Setting(
        "trim",
        "trim leading and trailing silence of the output",
        "裁掉输出开头和结尾的静音",
        default=False,
        type=bool,
        flag="--trim",
        doors=(*SPEECH_DOORS, *cli("synth", "convert", *LONG_COMMANDS)),
        group="request",
    ),
    Setting(
        "loudness_lufs",
        "normalise the output's loudness to this many LUFS, e.g. -16 (speech on the web) or -23 (broadcast); "
        "off by default",
        "将输出响度归一化到此 LUFS 值，如 -16（网络语音）或 -23（广播）；默认不处理",
        type=float,
        range=(-40.0, -5.0),  # quieter is lost under noise; louder cannot stay under the -1 dBFS peak ceiling
        step=0.5,
        flag="--loudness",
        metavar="LUFS",
        page_default=-16.0,  # speech on the web and in podcasts; the page's normalise box is off by default
        default_words="off (the page's slider starts at -16)",
        doors=(*SPEECH_DOORS, *cli("synth", "convert", *LONG_COMMANDS)),
        group="request",
    ),
    Setting(
        "pause",
        "seconds of silence between a dialogue's lines",
        "对话各行之间的静音秒数",
        default=0.4,
        type=float,
        range=(0.0, 10.0),
        page_range=(0.0, 3.0),  # the slider's span; a longer pause is typed through /v1 or the CLI
        step=0.05,
        flag="--pause",
        doors=(PAGE, V1, *cli("dialogue")),
        group="longform",
    ),
    Setting(
        "speed_limit",
        "how much a subtitle cue may be sped up at most to fit its time",
        "为对齐字幕时间，每条字幕最多可加速的倍数",
        default=1.5,
        type=float,
        range=(1.0, 2.0),  # the model's own speed range ends at 2.0
        step=0.05,
        flag="--speed-limit",
        doors=(PAGE, V1, *cli("dub")),
        group="longform",
    ),
    Setting(
        "batch_name",
        "a batch's folder under outputs/ (the same name resumes it): letters of any script, digits, spaces, '.', "
        "'_' and '-', starting with a letter or digit, at most 120 characters",
        "批次在 outputs/ 下的文件夹名（同名可续做）：任意文字的字母、数字、空格、'.'、'_' 和 '-'，以字母或数字开头，"
        "最多 120 个字符",
        default_words="the lines file's name (page), a new folder of its own (conversions); the CLI: --out-dir's name",
        doors=(PAGE, V1, *cli("batch")),
        group="longform",
    ),
)

# Letters and digits of any script, then also spaces, '.', '_' and '-'; never a path ("/", "\\", "..").
_BATCH_NAME = re.compile(r"[^\W_][\w .-]{0,119}")
_RESULT_FILE = re.compile(r"[^\W_][\w .-]{0,135}")
_NOT_IN_A_NAME = re.compile(r"[^\w .-]+")


def batch_name(typed: str | None) -> str | None:
    """The folder name a batch runs in for what the user typed (surrounding spaces dropped), None when nothing
    was typed; RequestError("name", "bad_name") naming the rule otherwise. One rule for page, /v1 and CLI."""
    name = (typed or "").strip()
    if not name:
        return None
    if not _BATCH_NAME.fullmatch(name) or ".." in name:
        raise RequestError(
            "name",
            "bad_name",
            f"the batch name {name!r} may use letters, digits, spaces, '.', '_' and '-' only, start with a letter "
            "or digit, and be at most 120 characters",
        )
    return name


def servable_file_name(name: str) -> bool:
    """Whether ``name`` may name a long-form result file to download: the batch-name rule, with room for an
    extension (``<batch name>.zip``)."""
    return bool(_RESULT_FILE.fullmatch(name)) and ".." not in name


def batch_name_for(folder_name: str) -> str:
    """A valid batch name made from a folder's name (the CLI names the app's batch after --out-dir): each run of
    other characters becomes '-'; 'batch' when nothing is left."""
    cleaned = _NOT_IN_A_NAME.sub("-", folder_name).replace("..", "-").strip(" .-_")[:120].strip()
    return cleaned or "batch"
