"""The table's environment-only rows: switches for a machine's memory, the model files and the network runtimes,
and the tuning and diagnostic switches of the CUDA path (each measured in bench/README.md). No door offers them;
they are set in the environment of ``bash run.sh`` or of a test run. Yes/no variables read 0, false, no, off or
empty as no."""

from __future__ import annotations

from cosyvoice_mac.settings.setting import ENV, Setting


def _env_only(name: str, variable: str, help: str, help_zh: str, group: str = "advanced", **values) -> Setting:
    return Setting(name, help, help_zh, env=variable, doors=(ENV,), group=group, **values)


ADVANCED_ROWS = (
    _env_only(
        "low_memory",
        "COSYVOICE_LOW_MEMORY",
        "the low-memory mode (16-bit LLM weights, ONNX front ends loaded only while a prompt is encoded): 1, 0 or "
        "auto (on at 12 GiB of RAM or less)",
        "低内存模式（16 位 LLM 权重，仅在编码提示音频时加载 ONNX 前端）：1、0 或 auto（内存不超过 12 GiB 时开启）",
        group="machine",
        default="auto",
    ),
    _env_only(
        "batch_lines",
        "COSYVOICE_BATCH_LINES",
        "the most requests the model speaks at once: a long-form job's lines, and waiting non-streamed requests the "
        "queue joins (the LLM decodes them as one batch, on a GPU the flow and vocoder too; each one's speech is "
        "what it gets alone, to the rounding of the batched products); unset: what the device suits (CPU 4, GPU 16, "
        "the low-memory mode 2); 1 turns batching off",
        "模型一次合成的最多请求数：长篇任务的各行，以及队列合并的等待中的非流式请求（LLM 将它们作为一批"
        "解码，GPU 上 flow 与声码器亦然；每个的语音与单独合成相同，仅差批量运算的舍入）；"
        "不设则按设备选择（CPU 4，GPU 16，低内存模式 2）；1 为关闭批处理",
        group="machine",
        type=int,
        range=(1, 64),
    ),
    _env_only(
        "llm_file",
        "COSYVOICE_LLM",
        "which LLM file a CosyVoice3 folder loads: rl (llm.rl.pt, the RL-tuned one) or base (llm.pt); unset: as "
        "`download --rl` chose",
        "CosyVoice3 文件夹加载哪个 LLM 文件：rl（强化学习调优的 llm.rl.pt）或 base（llm.pt）；"
        "不设则按 `download --rl` 的选择",
        group="machine",
        choices=("rl", "base"),
    ),
    _env_only(
        "mlx_llm",
        "COSYVOICE_MLX_LLM",
        "the MLX LLM's precision (fp32, fp16, bf16, int8 or int4); set, it wins over the page's menu",
        "MLX 引擎中 LLM 的精度（fp32、fp16、bf16、int8 或 int4）；设置后优先于页面菜单",
        group="machine",
        choices=("fp32", "fp16", "bf16", "int8", "int4"),
    ),
    _env_only(
        "mlx_cache",
        "COSYVOICE_MLX_CACHE",
        "folder for the MLX engine's converted weights ('off': convert in memory each time)",
        "MLX 引擎转换后权重的缓存文件夹（'off'：每次在内存中转换）",
        group="machine",
        default_words="the user cache folder's mlx/",
    ),
    _env_only(
        "onnx_provider",
        "COSYVOICE_ONNX_PROVIDER",
        "where the ONNX front ends (speech tokenizer, speaker embedding) run: auto, cpu, cuda or coreml",
        "ONNX 前端（语音分词器、说话人嵌入）的运行位置：auto、cpu、cuda 或 coreml",
        group="machine",
        default="auto",
        choices=("auto", "cpu", "cuda", "coreml"),
    ),
    _env_only(
        "asr_download",
        "COSYVOICE_ASR_DOWNLOAD",
        "0: never download a speech recogniser (the transcript suggestion uses what is already there)",
        "0：不下载语音识别模型（转写建议只用已有的模型）",
        group="machine",
        default=True,
        type=bool,
    ),
    _env_only(
        "engine_menu",
        "COSYVOICE_ENGINE_MENU",
        "1: show the page's engine menu on a machine that is not Apple Silicon (MLX's CPU backend, for tests)",
        "1：在非 Apple 芯片的机器上也显示页面的引擎菜单（MLX 的 CPU 后端，用于测试）",
        default=False,
        type=bool,
    ),
    _env_only(
        "cuda_graphs",
        "COSYVOICE_CUDA_GRAPHS",
        "0: no CUDA graphs at all (LLM steps, flow, vocoder); a diagnostic switch, slower",
        "0：完全不用 CUDA 图（LLM 步骤、流模型、声码器）；诊断用，更慢",
        default=True,
        type=bool,
    ),
    _env_only(
        "flow_length_graphs",
        "COSYVOICE_FLOW_LENGTH_GRAPHS",
        "0: no CUDA graphs per length bucket for the 16-bit flow (diagnostic)",
        "0：16 位流模型不按长度分桶使用 CUDA 图（诊断用）",
        default=True,
        type=bool,
    ),
    _env_only(
        "flow_shared_graphs",
        "COSYVOICE_FLOW_SHARED_GRAPHS",
        "0: no CUDA graphs shared across prompts for the flow's streamed chunks (diagnostic)",
        "0：流模型的流式分段不使用跨提示共享的 CUDA 图（诊断用）",
        default=True,
        type=bool,
    ),
    _env_only(
        "vocoder_graphs",
        "COSYVOICE_VOCODER_GRAPHS",
        "0: no CUDA graphs for the vocoder's first chunks (diagnostic)",
        "0：声码器的前几个分段不使用 CUDA 图（诊断用）",
        default=True,
        type=bool,
    ),
    _env_only(
        "compile_decode",
        "COSYVOICE_COMPILE_DECODE",
        "1: torch.compile the LLM's bucketed decoding step (any device; not measured on MPS yet)",
        "1：用 torch.compile 编译 LLM 的分桶解码步骤（任何设备；尚未在 MPS 上测量）",
        default=False,
        type=bool,
    ),
    _env_only(
        "fuse_decode",
        "COSYVOICE_FUSE_DECODE",
        "0: in CUDA graphs mode, capture ATen's kernels instead of torch.compile's fused step (slower; diagnostic)",
        "0：CUDA 图模式下捕获 ATen 内核而不是 torch.compile 融合后的步骤（更慢；诊断用）",
        default=True,
        type=bool,
    ),
    _env_only(
        "device_sampling",
        "COSYVOICE_DEVICE_SAMPLING",
        "0: in CUDA graphs mode, sample each token on the host instead of inside the graph (same tokens; slower)",
        "0：CUDA 图模式下在主机端而不是图内采样每个词元（结果相同；更慢）",
        default=True,
        type=bool,
    ),
    _env_only(
        "eager_rounding",
        "COSYVOICE_EAGER_ROUNDING",
        "1 or 0: whether a compiled 16-bit decoding step rounds as eager PyTorch does (same tokens as eager for "
        "a seed); unset: on where the step is compiled at 16 bits",
        "1 或 0：编译后的 16 位解码步骤是否按 PyTorch eager 模式取整（同一种子得到相同词元）；不设：16 位编译时开启",
        default_words="on where a step is compiled at 16 bits",
        type=bool,
    ),
    _env_only(
        "serial_device",
        "COSYVOICE_SERIAL_DEVICE",
        "1: a request's threads take turns on the device as they must on MPS (to measure that elsewhere)",
        "1：像在 MPS 上那样让一个请求的多个线程轮流使用设备（用于在其他设备上测量）",
        default=False,
        type=bool,
    ),
    _env_only(
        "parity_dir",
        "COSYVOICE_PARITY_DIR",
        "folder of the golden parity vectors `doctor` checks against",
        "`doctor` 用来比对的黄金参考向量所在文件夹",
        default_words="../shared/parity beside the checkout",
    ),
    _env_only(
        "undocumented_events",
        "COSYVOICE_UNDOCUMENTED_EVENTS",
        "1: the page's internal events stay callable (undocumented) from outside; the reliability tests set it",
        "1：页面内部事件可从外部调用（不公开文档）；可靠性测试会设置它",
        default=False,
        type=bool,
    ),
)
