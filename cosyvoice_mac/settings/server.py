"""The table's rows for the server and the model: where the app listens and keeps its files, which model runs
where and how (``serve`` and the CLI commands that may build the model in their own process)."""

from __future__ import annotations

import math
from pathlib import Path

from cosyvoice_mac.paths import CACHE_VARIABLE, DEFAULT_HOST, DEFAULT_PORT, MODELS_VARIABLE, OUTPUTS_VARIABLE
from cosyvoice_mac.settings.setting import LONG_COMMANDS, MODEL_COMMANDS, PAGE, PYTHON, Setting, cli
from cosyvoice_mac.wire import KEY_VARIABLE

# What Core ML accepts (coremltools' ComputeUnit names); the vocoder menu offers "coreml:<unit>" for each.
COMPUTE_UNITS = ("ALL", "CPU_AND_GPU", "CPU_AND_NE", "CPU_ONLY")

SERVER_ROWS = (
    Setting(
        "host",
        "address to listen on (this computer only by default; give your network address to let other machines in)",
        "监听地址（默认只允许本机访问；填写局域网地址可让其他机器访问）",
        default=DEFAULT_HOST,
        flag="--host",
        doors=cli("serve"),
    ),
    Setting("port", "port to listen on", "监听端口", default=DEFAULT_PORT, type=int, flag="--port", doors=cli("serve")),
    Setting(
        "models_dir",
        "folder holding model folders",
        "存放模型文件夹的目录",
        type=Path,
        flag="--models-dir",
        env=MODELS_VARIABLE,
        default_words="$COSYVOICE_MODELS_DIR, else models/",
        doors=(*cli("serve", "dialogue", "dub", "batch"), PYTHON),
    ),
    Setting(
        "outputs_dir",
        "where generated audio and its sidecars are saved",
        "生成的音频及其说明文件的保存位置",
        type=Path,
        flag="--outputs-dir",
        env=OUTPUTS_VARIABLE,
        default_words="$COSYVOICE_OUTPUTS_DIR, else outputs/",
        doors=cli(*MODEL_COMMANDS),
    ),
    Setting(
        "cache_dir",
        "speaker cache, saved voices, glossary and the page's remembered choices",
        "说话人缓存、已保存的声音、词汇表和页面记住的选择",
        type=Path,
        flag="--cache-dir",
        env=CACHE_VARIABLE,
        default_words="$COSYVOICE_CACHE_DIR, else the user cache folder",
        doors=cli("serve"),
    ),
    Setting(
        "model",
        "model folder, a folder name under models/, or 'preview' for the preview voice",
        "模型文件夹、models/ 下的文件夹名，或 'preview'（预览声音）",
        flag="--model",
        default_words="a CosyVoice3 model if there is one, else any model, else the preview voice",
        doors=(PAGE, *cli(*MODEL_COMMANDS), PYTHON),
        group="model",
    ),
    Setting(
        "device",
        "auto (mps, cuda, cpu), mps, cuda, cuda:N or cpu",
        "auto（依次尝试 mps、cuda、cpu）、mps、cuda、cuda:N 或 cpu",
        default="auto",
        flag="--device",
        env="COSYVOICE_DEVICE",
        env_fills_flag=True,
        doors=(*cli(*MODEL_COMMANDS), PYTHON),
        group="model",
    ),
    Setting(
        "precision",
        "auto: each stage not named runs in the fastest dtype the quality gate allows here, measured once per "
        "machine; float32: every stage not named in float32",
        "auto：未指定的阶段使用质量门允许的最快精度（每台机器测一次）；float32：未指定的阶段全部用 float32",
        default="auto",
        choices=("auto", "float32"),
        flag="--precision",
        env="COSYVOICE_PRECISION",
        default_words="$COSYVOICE_PRECISION, else auto",
        doors=(*cli(*MODEL_COMMANDS), PYTHON),
        group="model",
    ),
    Setting(
        "dtype",
        "the LLM's dtype: float32, float16, bfloat16 or int8 (the flow keeps its own, see --flow-dtype)",
        "LLM 的精度：float32、float16、bfloat16 或 int8（流模型另设，见 --flow-dtype）",
        flag="--dtype",
        env="COSYVOICE_DTYPE",
        default_words="$COSYVOICE_DTYPE, else as --precision picks",
        doors=(*cli(*MODEL_COMMANDS), PYTHON),
        group="model",
    ),
    Setting(
        "llm_dtype",
        "the LLM's dtype (wins over --dtype)",
        "LLM 的精度（优先于 --dtype）",
        flag="--llm-dtype",
        doors=(*cli(*MODEL_COMMANDS), PYTHON),
        group="model",
    ),
    Setting(
        "flow_dtype",
        "the flow's dtype: float32, float16 or bfloat16",
        "流模型的精度：float32、float16 或 bfloat16",
        flag="--flow-dtype",
        doors=(*cli(*MODEL_COMMANDS), PYTHON),
        group="model",
    ),
    Setting(
        "reprobe",
        "measure this machine's precision timings again",
        "重新测量本机各精度的速度",
        default=False,
        type=bool,
        flag="--reprobe",
        doors=(*cli(*MODEL_COMMANDS, "bench"), PYTHON),
        group="model",
    ),
    Setting(
        "engine",
        "what runs the model: auto (MLX on Apple Silicon, else PyTorch), mlx or torch",
        "运行模型的引擎：auto（Apple 芯片上用 MLX，否则 PyTorch）、mlx 或 torch",
        default="auto",
        choices=("auto", "mlx", "torch"),
        flag="--engine",
        env="COSYVOICE_ENGINE",
        default_words="$COSYVOICE_ENGINE, else the page's engine menu as last chosen, else auto",
        doors=(PAGE, *cli(*MODEL_COMMANDS), PYTHON),
        group="model",
    ),
    Setting(
        "vocoder",
        "torch, or coreml: run the vocoder with Core ML where macOS allows (converted on first use)",
        "torch，或 coreml：在 macOS 允许时用 Core ML 运行声码器（首次使用时转换）",
        default="torch",
        choices=("torch", "coreml"),
        flag="--vocoder",
        doors=(PAGE, *cli("serve", "synth")),
        group="model",
    ),
    Setting(
        "compute_units",
        "where Core ML may run the vocoder",
        "Core ML 运行声码器可用的计算单元",
        default="ALL",
        choices=COMPUTE_UNITS,
        flag="--compute-units",
        doors=(PAGE, *cli("serve", "synth")),
        group="model",
    ),
    Setting(
        "torch_threads",
        "CPU threads for the model worker",
        "模型进程使用的 CPU 线程数",
        type=int,
        range=(1, math.inf),
        flag="--torch-threads",
        default_words="torch's choice",
        doors=cli("serve"),
        group="model",
    ),
    Setting(
        "max_queue",
        "requests that may wait for the model at once",
        "可同时等待模型的请求数",
        default=8,
        type=int,
        range=(1, math.inf),
        flag="--max-queue",
        doors=cli("serve"),
    ),
    Setting(
        "allowed_origin",
        "another web site (scheme://host:port) whose pages may send requests that change something here, such as "
        "uploads; repeat for more ('*' for any). By default only this app's own page may",
        "允许发送修改请求（如上传）的其他网站（scheme://host:port）；可重复（'*' 表示任意）。"
        "默认只允许本应用自己的页面",
        flag="--allowed-origin",
        env="COSYVOICE_ALLOWED_ORIGINS",
        env_fills_flag=True,
        repeat=True,
        metavar="ORIGIN",
        doors=cli("serve"),
    ),
    Setting(
        "allowed_host",
        "a name this server answers to besides its --host address (and localhost on this computer), such as "
        "my-mac.local or the name of a proxy in front of it; repeat for more. A request for any other name is "
        "refused, so a web page cannot reach the app through a DNS name of its own",
        "除 --host 地址（及本机 localhost）外本服务器响应的名称，如 my-mac.local 或前置代理的名称；可重复。"
        "其他名称的请求一律拒绝，防止网页借自己的域名访问本应用",
        flag="--allowed-host",
        env="COSYVOICE_ALLOWED_HOSTS",
        env_fills_flag=True,
        repeat=True,
        metavar="NAME",
        doors=cli("serve"),
    ),
    Setting(
        "temp_max_age",
        "seconds after which uploads and copies of results are deleted from the page's temporary folder (the "
        "results in outputs/ are kept)",
        "页面临时文件夹中的上传文件和结果副本保留的秒数（outputs/ 中的结果不受影响）",
        default=3600,
        type=int,
        range=(1, math.inf),
        flag="--temp-max-age",
        metavar="SECONDS",
        doors=cli("serve"),
    ),
    Setting(
        "hang_timeout",
        "seconds without a sign of life from the model process before it is killed and restarted (its running "
        "job fails with that reason; waiting jobs stay)",
        "模型进程无响应多少秒后被终止并重启（正在运行的任务以此原因失败，排队的任务保留）",
        default=30.0,
        type=float,
        range=(0.1, math.inf),
        flag="--hang-timeout",
        metavar="SECONDS",
        doors=cli("serve"),
    ),
    Setting(
        "api_key",
        "key the /v1 API asks for (Authorization: Bearer KEY). Required when --host is not this computer, and then "
        "every door needs it: the page asks for it once, the Gradio API and uploads take the same header",
        "/v1 API 要求的密钥（Authorization: Bearer KEY）。--host 不是本机时必须设置，此时所有入口都需要它",
        flag="--api-key",
        env=KEY_VARIABLE,
        default_words="$COSYVOICE_API_KEY, else none",
        doors=cli("serve", "synth", "convert", *LONG_COMMANDS, "voices", "glossary"),
    ),
    Setting(
        "no_auth",
        "with a --host beyond this computer and no key: start anyway, open to everyone who can reach this machine "
        "(the page and the console warn); without it such a server refuses to start",
        "--host 对外开放且没有密钥时仍然启动，任何能访问本机的人都可使用（页面和终端会警告）；不加则拒绝启动",
        default=False,
        type=bool,
        flag="--no-auth",
        doors=cli("serve"),
    ),
    Setting(
        "server",
        "the running app to send the job to (when none answers there, the model runs here); given, it must answer",
        "接收任务的正在运行的应用（无应答时在本进程运行模型）；显式给出时必须能应答",
        flag="--server",
        env="COSYVOICE_SERVER",
        default_words=f"$COSYVOICE_SERVER, else the app running on this machine (any port), else "
        f"http://{DEFAULT_HOST}:{DEFAULT_PORT}",
        metavar="URL",
        doors=cli("synth", "convert", *LONG_COMMANDS, "glossary"),
        group="cli",
    ),
    Setting(
        "voices_server",
        "the running app whose saved voices to list or change (when none answers: this machine's voice "
        "library); given, it must answer",
        "要查看或修改其已保存声音的正在运行的应用（无应答时：本机的声音库）；显式给出时必须能应答",
        flag="--server",
        metavar="URL",
        default_words="$COSYVOICE_SERVER, else the app running on this machine (any port), else this machine's "
        "voice library",
        doors=cli("voices"),
        group="cli",
    ),
    Setting(
        "local",
        "run the model in this process even if the app runs",
        "即使应用正在运行，也在本进程运行模型",
        default=False,
        type=bool,
        flag="--local",
        doors=cli("synth", "convert", *LONG_COMMANDS, "glossary"),
        group="cli",
    ),
    Setting(
        "cluster",
        "run the jobs on a Ray cluster's workers (serve: every door's, under the app's one queue; the long-form "
        "commands: the lines): its head's address (host:6379), or local:N to start N workers on this computer; "
        "the files, the manifest and the report stay here (docs/cluster.md)",
        "在 Ray 集群的工作节点上运行任务（serve：各入口的任务，仍由应用的同一队列调度；长文本命令：各行）："
        "头节点地址（host:6379），或 local:N 在本机启动 N 个工作进程；"
        "文件、清单和报告仍保存在本机（见 docs/cluster.md）",
        flag="--cluster",
        env="RAY_ADDRESS",
        default_words="$RAY_ADDRESS (the long-form commands: unless --local or --server is given), else none: "
        "the jobs run on this computer's worker",
        metavar="ADDRESS",
        doors=cli("serve", *LONG_COMMANDS),
        group="cli",
    ),
)
