"""The table's rows for the tool commands: the Core ML conversion (``coreml convert``), the benchmark
(``bench``) and the health check (``doctor``)."""

from __future__ import annotations

from pathlib import Path

from cosyvoice_mac.settings.setting import Setting, cli
from cosyvoice_mac.versions import VERSIONS

TOOL_ROWS = (
    Setting(
        "version",
        "which model architecture to build",
        "要构建的模型版本",
        default=VERSIONS[0],
        choices=VERSIONS,
        flag="--version",
        doors=cli("bench", "doctor"),
        group="tools",
    ),
    Setting(
        "random_weights",
        "build the full-size architecture with RANDOM weights (tests and benchmarks only: the audio is noise)",
        "用随机权重构建完整模型（仅用于测试和基准：输出是噪声）",
        choices=VERSIONS,
        flag="--random-weights",
        doors=cli("synth", "coreml convert"),
        group="tools",
    ),
    Setting(
        "coreml_model",
        "the model folder whose vocoder to convert (e.g. models/Fun-CosyVoice3-0.5B)",
        "要转换其声码器的模型文件夹（如 models/Fun-CosyVoice3-0.5B）",
        type=Path,
        flag="--model",
        doors=cli("coreml convert"),
        group="tools",
    ),
    Setting(
        "coreml_precision",
        "the Core ML decoder's precision (the f0 network is always fp32)",
        "Core ML 解码器的精度（f0 网络始终为 fp32）",
        default="fp16",
        choices=("fp16", "fp32"),
        flag="--precision",
        doors=cli("coreml convert"),
        group="tools",
    ),
    Setting(
        "coreml_target",
        "minimum macOS the Core ML packages run on",
        "Core ML 包可运行的最低 macOS 版本",
        default="macOS14",
        choices=("macOS13", "macOS14", "macOS15"),
        flag="--target",
        doors=cli("coreml convert"),
        group="tools",
    ),
    Setting(
        "coreml_shapes",
        "flexible length (GPU/CPU), fixed chunks (Neural Engine) or both",
        "可变长度（GPU/CPU）、固定分块（神经网络引擎）或两者都要",
        default="both",
        choices=("both", "flexible", "chunked"),
        flag="--shapes",
        doors=cli("coreml convert"),
        group="tools",
    ),
    Setting(
        "chunk_frames",
        "mel frames per fixed chunk (above 136 it passes the Neural Engine's reported width limit)",
        "每个固定分块的梅尔帧数（超过 136 会超出神经网络引擎的宽度限制）",
        default=128,
        type=int,
        flag="--chunk-frames",
        doors=cli("coreml convert"),
        group="tools",
    ),
)
