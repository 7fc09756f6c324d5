"""The table's rows for what one job asks for: the synthesis request's fields (page, ``/v1``, Gradio API, CLI,
Python) and the long-form fields (dialogue pause, dubbing speed limit, a batch's folder name), with the one rule
for a batch's folder name."""

from __future__ import annotations

import re

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.settings.setting import ENV, GRADIO, LONG_COMMANDS, PAGE, PYTHON, V1, Setting, cli

SPEECH_DOORS = (PAGE, V1, GRADIO, PYTHON)  # every door that speaks one request
MAX_SEED = 2**31 - 1  # sentence i samples with seed + i: stays a valid generator seed
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_window")  # the sampling rows, a request's names

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
    # Sampling: how the speech LM draws each token (repetition-aware sampling). Unset, each is the model's own
    # (its YAML's llm.sampling; both CosyVoice versions ship top_p 0.8, top_k 25, window 10, no temperature).
    Setting(
        "temperature",
        "sampling temperature of the speech tokens: lower is steadier, higher more varied",
        "语音 token 的采样温度：越低越稳定，越高越多变",
        type=float,
        range=(0.5, 1.5),  # lower: flat, drawn-out speech the repetition guard keeps re-drawing; higher: babble
        step=0.05,
        flag="--temperature",
        page_default=1.0,
        default_words="the model's own (1, as trained)",
        doors=(*SPEECH_DOORS, *cli("synth", *LONG_COMMANDS)),
        group="sampling",
    ),
    Setting(
        "top_p",
        "nucleus: draw among the likeliest speech tokens that together hold this much probability",
        "核采样：在累计概率达到此值的最可能语音 token 中抽取",
        type=float,
        range=(0.1, 1.0),  # below 0.1 the nucleus is one token: greedy decoding, which loops
        step=0.05,
        flag="--top-p",
        page_default=0.8,
        default_words="the model's own (0.8)",
        doors=(*SPEECH_DOORS, *cli("synth", *LONG_COMMANDS)),
        group="sampling",
    ),
    Setting(
        "top_k",
        "draw among at most this many of the likeliest speech tokens",
        "最多在这么多个最可能的语音 token 中抽取",
        type=int,
        range=(1, 100),  # past 100 of 6561 speech tokens the tail is noise the nucleus cuts anyway
        step=1,
        flag="--top-k",
        page_default=25,
        default_words="the model's own (25)",
        doors=(*SPEECH_DOORS, *cli("synth", *LONG_COMMANDS)),
        group="sampling",
    ),
    Setting(
        "repetition_window",
        "repetition guard: a token drawn again within this many recent tokens is re-drawn from all tokens",
        "重复保护：在最近这么多个 token 内再次抽到的 token 会从全部 token 中重新抽取",
        type=int,
        range=(1, 50),  # the model's guard fires at window x 0.1 repeats: past 50 it lets 5-token loops through
        step=1,
        flag="--repetition-window",
        page_default=10,
        default_words="the model's own (10)",
        doors=(*SPEECH_DOORS, *cli("synth", *LONG_COMMANDS)),
        group="sampling",
    ),
    Setting(
        "check",
        "check each finished sentence (a recogniser compares it with the text; length, repeats, silences and the "
        "ending are measured) and retake the ones that fail; also times the words for captions",
        "检查每个合成完的句子（语音识别与文本对比，并检查时长、重复、静音和结尾），不合格则重新生成；同时给出逐词时间用于字幕",
        default=True,
        type=bool,
        env="COSYVOICE_TAKE_CHECK",
        doors=(PAGE, V1, PYTHON),
        group="request",
    ),
    Setting(
        "no_check",
        "skip the take check, its retakes and the word timing (the audio comes sooner, unchecked)",
        "跳过句子检查、重新生成和逐词计时（更快出结果，但未经检查）",
        default=False,
        type=bool,
        flag="--no-check",
        doors=cli("synth", *LONG_COMMANDS),
        group="request",
    ),
    Setting(
        "captions",
        "also write the words' times as captions in this format beside the audio and print where",
        "同时在音频旁写出此格式的逐词时间字幕，并显示其路径",
        choices=("srt", "vtt", "json"),
        flag="--captions",
        doors=cli("synth"),
        group="request",
    ),
    Setting(
        "retakes",
        "how many more takes, each with a new seed, a sentence that fails the check gets before the best one is kept",
        "未通过检查的句子最多再用新种子重新生成几次（之后保留最好的一次）",
        default=2,
        type=int,
        range=(0, 5),  # each retake costs a sentence's synthesis again; past 5 a fault is the text's, not luck
        env="COSYVOICE_RETAKES",
        doors=(ENV,),
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
    Setting(
        "retake",
        "make again, with new seeds, the lines an earlier run left flagged by the take check, reusing its other lines "
        "and keeping every earlier take (the CLI: the run whose OUT.lines.json or --out-dir is given; /v1: "
        "retake_from names a dialogue's or dub's result, a batch's retake is true; the page: the last job's)",
        "用新种子重新生成上一次运行中被检查标记的行，其他行沿用，之前的每一次生成都保留（命令行：--out 旁的 "
        "OUT.lines.json 或 --out-dir 的那次运行；/v1：retake_from 指定对话或配音的结果，批量用 retake=true；"
        "页面：最近一次任务）",
        default=False,
        type=bool,
        flag="--retake",
        doors=(PAGE, V1, *cli(*LONG_COMMANDS)),
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
