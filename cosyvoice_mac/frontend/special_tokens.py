"""The special text tokens CosyVoice2 / CosyVoice3 add to the Qwen2 tokenizer, and the training instructions.

The lists are data taken from upstream ``cosyvoice/tokenizer/tokenizer.py`` (FunAudioLLM/CosyVoice, commit
ace7c47): ``CosyVoice2Tokenizer`` / ``CosyVoice3Tokenizer`` call ``add_special_tokens`` with these lists, which
skips tokens already in the vocabulary (``<|im_start|>``, ``<|im_end|>``) and appends the rest **in list order**
from id 151646. The order therefore defines the ids the LLM's embedding rows were trained with: never sort,
dedupe or reorder these tuples.

Resulting ids (both versions): ``<|endofprompt|>`` 151646, ``[breath]`` 151647 ... ``[mn]`` 151662.
CosyVoice3 only: ``<|endofsystem|>`` 151663, ARPAbet phones 151664-151747, pinyin units 151748-151923.
"""

from __future__ import annotations

from dataclasses import dataclass

ENDOFPROMPT_ID = 151646  # hard-coded upstream in CosyVoice3LM.inference

# Tokens BlankEN's own vocabulary already has (ids 151643-151645); listed as upstream passes them.
QWEN_CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")
EOS_TOKEN = "<|endoftext|>"

# Paralinguistic / control tokens shared by both versions, in upstream order.
PARALINGUISTIC_TOKENS = (
    "<|endofprompt|>",
    "[breath]",
    "<strong>",
    "</strong>",
    "[noise]",
    "[laughter]",
    "[cough]",
    "[clucking]",
    "[accent]",
    "[quick_breath]",
    "<laughter>",
    "</laughter>",
    "[hissing]",
    "[sigh]",
    "[vocalized-noise]",
    "[lipsmack]",
    "[mn]",
)

ENDOFSYSTEM = "<|endofsystem|>"

# 84 CMU / ARPAbet phones (vowels bare and with stress 0/1/2), upstream order.
ARPABET_PHONES = tuple(
    f"[{p}]"
    for p in """
    AA AA0 AA1 AA2 AE AE0 AE1 AE2 AH AH0 AH1 AH2 AO AO0 AO1 AO2 AW AW0 AW1 AW2 AY AY0 AY1 AY2
    B CH D DH EH EH0 EH1 EH2 ER ER0 ER1 ER2 EY EY0 EY1 EY2 F G HH IH IH0 IH1 IH2 IY IY0 IY1 IY2
    JH K L M N NG OW OW0 OW1 OW2 OY OY0 OY1 OY2 P R S SH T TH UH UH0 UH1 UH2 UW UW0 UW1 UW2
    V W Y Z ZH
""".split()
)

# 176 pinyin units: initials and tone-marked finals (neutral tone unmarked), upstream order (NFC).
PINYIN_UNITS = tuple(
    f"[{p}]"
    for p in """
    a ai an ang ao b c ch d e ei en eng f g h i ian in ing iu ià iàn iàng iào iá ián iáng iáo iè ié
    iòng ióng iù iú iā iān iāng iāo iē iě iōng iū iǎ iǎn iǎng iǎo iǒng iǔ j k l m n o ong ou p q r s
    sh t u uang ue un uo uà uài uàn uàng uá uái uán uáng uè ué uì uí uò uó uā uāi uān uāng uē uě uī
    uō uǎ uǎi uǎn uǎng uǐ uǒ vè w x y z zh à ài àn àng ào á ái án áng áo è èi èn èng èr é éi én éng
    ér ì ìn ìng í ín íng ò òng òu ó óng óu ù ùn ú ún ā āi ān āng āo ē ēi ēn ēng ě ěi ěn ěng ěr ī īn
    īng ō ōng ōu ū ūn ǎ ǎi ǎn ǎng ǎo ǐ ǐn ǐng ǒ ǒng ǒu ǔ ǔn ǘ ǚ ǜ
""".split()
)

# The exact ``additional_special_tokens`` lists upstream passes (including the two already present).
SPECIAL_TOKENS = {
    "cosyvoice2": QWEN_CHAT_TOKENS + PARALINGUISTIC_TOKENS,
    "cosyvoice3": QWEN_CHAT_TOKENS + PARALINGUISTIC_TOKENS + (ENDOFSYSTEM,) + ARPABET_PHONES + PINYIN_UNITS,
}

# Every token that can appear in text for either version (used to keep them intact through normalisation).
ALL_SPECIAL_TOKENS = (EOS_TOKEN,) + SPECIAL_TOKENS["cosyvoice3"]


@dataclass(frozen=True)
class InstructionPreset:
    """One of the 26 instructions CosyVoice3 was trained with (``cosyvoice/utils/common.py::instruct_list``).

    ``text`` is the bare instruction; the LLM sees ``"You are a helpful assistant. " + text + "<|endofprompt|>"``
    (see :func:`cosyvoice_mac.frontend.text.format_instruction`). ``label`` is an English menu label of ours.
    """

    label: str
    text: str


INSTRUCTIONS = (
    InstructionPreset("Cantonese dialect", "请用广东话表达。"),
    InstructionPreset("Northeastern dialect", "请用东北话表达。"),
    InstructionPreset("Gansu dialect", "请用甘肃话表达。"),
    InstructionPreset("Guizhou dialect", "请用贵州话表达。"),
    InstructionPreset("Henan dialect", "请用河南话表达。"),
    InstructionPreset("Hubei dialect", "请用湖北话表达。"),
    InstructionPreset("Hunan dialect", "请用湖南话表达。"),
    InstructionPreset("Jiangxi dialect", "请用江西话表达。"),
    InstructionPreset("Minnan dialect", "请用闽南话表达。"),
    InstructionPreset("Ningxia dialect", "请用宁夏话表达。"),
    InstructionPreset("Shanxi dialect", "请用山西话表达。"),
    InstructionPreset("Shaanxi dialect", "请用陕西话表达。"),
    InstructionPreset("Shandong dialect", "请用山东话表达。"),
    InstructionPreset("Shanghainese", "请用上海话表达。"),
    InstructionPreset("Sichuan dialect", "请用四川话表达。"),
    InstructionPreset("Tianjin dialect", "请用天津话表达。"),
    InstructionPreset("Yunnan dialect", "请用云南话表达。"),
    InstructionPreset("Very loud", "Please say a sentence as loudly as possible."),
    InstructionPreset("Very soft", "Please say a sentence in a very soft voice."),
    InstructionPreset("Very slow", "请用尽可能慢地语速说一句话。"),
    InstructionPreset("Very fast", "请用尽可能快地语速说一句话。"),
    InstructionPreset("Very happy", "请非常开心地说一句话。"),
    InstructionPreset("Very sad", "请非常伤心地说一句话。"),
    InstructionPreset("Very angry", "请非常生气地说一句话。"),
    InstructionPreset("Peppa Pig style", "我想体验一下小猪佩奇风格，可以吗？"),
    InstructionPreset("Robot style", "你可以尝试用机器人的方式解答吗？"),
)
