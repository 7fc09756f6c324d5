"""Every word the page shows, in English and Chinese: two tables with the same keys.

``text(lang, key, **values)`` formats one entry; it escapes every value that is not itself a formatted
entry (a :class:`Markup`), because the page renders these strings as Markdown with HTML: a voice named
``<img src=x onerror=...>`` or an error quoting ``<script>`` must show as those characters, not as markup.
Keys name the place (``prompt_audio_label``), not
the words, so a translation can change without touching the layout. Language names ("English",
"中文") are shown in their own language and so live in ``LANGUAGES``, outside the tables.
"""

from __future__ import annotations

from cosyvoice_mac.preview.labels import COSYVOICE_LICENSE_NOTE, LICENSE_NOTE, PREVIEW_LABEL
from cosyvoice_mac.webui.strings_longform import EN as LONGFORM_EN
from cosyvoice_mac.webui.strings_longform import ZH as LONGFORM_ZH

LANGUAGES = (("English", "en"), ("中文", "zh"))
DEFAULT_LANGUAGE = "en"

EN: dict[str, str] = {
    # page
    "title": "CosyVoice for Mac",
    "subtitle": "Clone a voice from a few seconds of speech and make it say anything, on this computer.",
    "language_label": "Interface language",
    "notice": "**Only clone voices you have the right to use.** Ask the speaker first and never pass the "
    "result off as their real voice. Every file this app writes names, in its metadata, the software, "
    "model and settings that made it.",
    "notice_ok": "I understand",
    "no_model": "**No model installed yet.** Download one (about 5 GB) with:\n\n"
    "`bash run.sh download cosyvoice3`\n\n"
    "(or `bash run.sh download cosyvoice2`), then restart the app.",
    "no_model_preview": "Meanwhile the **preview voice** speaks: an approximate match of the prompt voice, "
    "not real cloning.",
    # voice
    "section_voice": "### 1. Voice",
    "prompt_audio_label": "Prompt audio: 3-30 s of clear speech (WAV, MP3, FLAC or M4A; upload or record)",
    "prompt_duration": "Prompt: {seconds:.1f} s ({speech:.1f} s of speech).",
    "prompt_too_long": "⚠️ The prompt has {speech:.1f} s of speech; the model takes at most {limit:g} s. "
    "Cut it to one clear sentence or a few (5-15 s is plenty).",
    "prompt_too_short": "⚠️ The prompt holds only {speech:.1f} s of sound; it needs at least {limit:g} s "
    "(3-10 s of clear speech works best). Record a longer sample.",
    "prompt_not_audio": "⚠️ {name} is not an audio file this app can read. Use WAV, MP3, FLAC or M4A.",
    "prompt_empty": "⚠️ {name} is an empty file (0 bytes). Record or export it again.",
    "prompt_missing": "⚠️ {name} is no longer on the server (uploads are kept for a while only). Upload it again.",
    "prompt_invalid_samples": "⚠️ {name} holds invalid samples (NaN or infinity); export it again as WAV or FLAC.",
    "prompt_silent": "⚠️ The prompt is silent. Check the microphone and record again.",
    "prompt_low_rate": "⚠️ {name} is sampled at {rate} Hz; a voice prompt needs at least {limit} Hz. "
    "Record or export it at 16 kHz or higher.",
    "prompt_no_decoder": "⚠️ {name} needs a system audio decoder (ffmpeg on Linux) that is not installed. "
    "Install ffmpeg, or convert the file to WAV or FLAC.",
    "prompt_needed": "⚠️ Upload or record a prompt voice, or pick a saved voice.",
    "transcript_label": "Transcript of the prompt audio",
    "transcript_placeholder": "Type exactly what the prompt recording says",
    "transcribe": "Transcribe",
    "transcribe_progress": "⏳ Transcribing the prompt recording… {seconds:.0f} s",
    "transcribe_download": "⏳ Downloading the speech recogniser: {done} of {total}…",
    "transcribe_done": "✅ Filled in from the recording. Check the words and correct them if needed.",
    "transcribe_empty": "⚠️ No words were recognised in the recording. Type the transcript.",
    "transcribe_needs_audio": "⚠️ Upload or record a prompt first, then transcribe it.",
    "transcribe_failed": "⚠️ {message}",
    "transcript_needed": "⚠️ Zero-shot mode needs the transcript of the prompt audio. Type what the "
    "recording says, or choose cross-lingual mode.",
    "voices_label": "Saved voice",
    "voices_info": "Pick a saved voice instead of uploading a prompt.",
    "voices_none": "(none: use the prompt audio)",
    "voice_in_use": "Using the saved voice “{name}”.",
    "voice_name_label": "Name for the current prompt voice",
    "voice_name_placeholder": "e.g. Grandpa reading",
    "save_voice": "Save voice",
    "delete_voice": "Delete voice",
    "voice_saved": "✅ Saved the voice “{name}”.",
    "voice_deleted": "🗑 Deleted the voice “{name}”.",
    "voice_save_needs_audio": "⚠️ Upload or record the prompt audio you want to keep as a voice.",
    "voice_saving": "⏳ Preparing the voice (the model extracts its features)…",
    "voice_save_no_model": "⚠️ No model is running, so the voice cannot be prepared. See the note at the top.",
    "voice_name_needed": "⚠️ Type a name for the voice.",
    "voice_pick_to_delete": "⚠️ Pick a saved voice to delete.",
    "voice_error": "⚠️ {message}",
    # text
    "section_text": "### 2. Text",
    "text_label": "Text to speak",
    "text_placeholder": "Type what the voice should say",
    "counter": "{count} / {limit} characters",
    "counter_over": "⚠️ {count} / {limit} characters: too long, split the text into several requests.",
    "text_empty": "⚠️ There is no text to speak: type a sentence.",
    "markup_help": "Pronunciation markup (CosyVoice3): pinyin `[h][ào]`, English phones "
    "`[M][AY0][N][UW1][T]`; sounds `[breath]` `[laughter]`; emphasis `<strong>…</strong>`.",
    "mode_label": "Mode",
    "mode_short_zero_shot": "zero-shot",
    "mode_short_cross_lingual": "cross-lingual",
    "mode_short_instruct": "instruct",
    "mode_zero_shot": "Zero-shot: clone with the transcript",
    "mode_cross_lingual": "Cross-lingual: no transcript needed",
    "mode_instruct": "Instruct: style, emotion or dialect",
    "preset_label": "Trained instructions",
    "preset_info": "Pick one to fill the instruction, or write your own.",
    "instruct_label": "Instruction",
    "instruct_placeholder": "e.g. 请用四川话表达。 or Please say a sentence in a very soft voice.",
    "instruct_needed": "⚠️ Instruct mode needs an instruction: pick one from the menu or type your own.",
    "seed_label": "Seed",
    "seed_info": "The same seed and settings give the same audio; 🎲 picks a new one.",
    "seed_invalid": "⚠️ The seed must be a whole number from 0 to {limit}.",
    "dice_title": "Pick a random seed",
    "speed_label": "Speed",
    "stream_label": "Stream",
    "stream_info": "Play the audio while it is being made.",
    "stream_speed_note": "ℹ️ Speed stays at 1.0 while streaming.",
    # generate
    "generate": "Generate",
    "stop": "Stop",
    "result_label": "Result",
    "status_waiting_model": "⏳ Waiting for the model to load…",
    "status_queued": "⏳ In the queue: position {position}.",
    "status_started": "⏳ Synthesising…",
    "status_progress": "⏳ Sentence {index} of {count}: {text}",
    "status_retry": "⏳ The device failed; retrying on the CPU…",
    "status_streaming": "🔊 Streaming sentence {index} of {count}: {audio:.1f} s of audio so far; first audio "
    "after {first:.1f} s.",
    "status_stream_summary": "🔊 Streamed: first audio after {first:.1f} s, finished after {elapsed:.1f} s.",
    "status_done": "✅ Done: {duration:.1f} s of audio in {seconds:.1f} s, seed {seed}. Saved as {file}.",
    "status_done_unsaved": "✅ Done: {duration:.1f} s of audio, seed {seed}. ⚠️ Not saved: {error}",
    "status_failed": "⚠️ Generation failed: {message}",
    "status_cancelled": "⏹ Stopped.",
    "status_interrupted": "⚠️ Not finished: {message}.",
    "status_not_answering": "⚠️ The model is not answering (no sign of life for {seconds:.0f} s). If it stays "
    "silent it is restarted by itself; waiting jobs keep their place.",
    "status_busy": "⚠️ Busy: the queue is full ({waiting} waiting, the most this app keeps), so yours would be "
    "number {position} in line. Nothing was queued: try again in about {seconds} s.",
    "status_busy_unknown": "⚠️ Busy: the queue is full ({waiting} waiting, the most this app keeps), so yours would "
    "be number {position} in line. Nothing was queued: try again when one has finished.",
    "status_no_model": "⚠️ No model is loaded, so nothing can be generated. See the note at the top.",
    "status_model_error": "⚠️ The model is not available: {message}. Fix the cause, then press Restart model.",
    "status_timeout": "⚠️ No answer from the model for {seconds:g} s. Press Stop, then Restart model.",
    "status_invalid": "⚠️ {message}",
    "status_notes": "ℹ️ {notes}",
    "result_preview": "🔶 **{label}** (`{command}`)",
    # history
    "history_label": "History (this session, newest first)",
    "history_empty": "Nothing generated in this session yet.",
    "col_time": "Time",
    "col_text": "Text",
    "col_mode": "Mode",
    "col_voice": "Voice",
    "col_seed": "Seed",
    "col_speed": "Speed",
    "col_duration": "Seconds",
    "col_model": "Model",
    "col_file": "File",
    "history_prompt_voice": "uploaded prompt",
    "history_pick_label": "Play an earlier result",
    "history_audio_label": "Earlier result",
    # model status
    "section_model": "### Model",
    "model_label": "Model",
    "model_info": "Model folders found in models/, or the preview voice",
    "preview_choice": "Preview voice (approximate, no download)",
    "preview_label": PREVIEW_LABEL,
    "history_preview": "🔶 " + PREVIEW_LABEL + " (`{command}`)",
    "licence_heading": "Licences",
    "licence_cosyvoice": COSYVOICE_LICENSE_NOTE,
    "licence_preview": LICENSE_NOTE,
    "restart": "Restart model",
    "restart_progress": "⏳ Restarting the model… {seconds:.0f} s",
    "switch_progress": "⏳ Loading {name}… {seconds:.0f} s",
    "restart_done": "✅ The model is ready ({seconds:.0f} s).",
    "restart_failed": "⚠️ The model did not start: {message}",
    "status_model": "**Model:** {name} ({version}, {model_id})",
    "status_model_preview": "**Model:** 🔶 {label} (`{command}`)",
    "status_licence": "**Licence:** {licence}",
    "status_state": "**State:** {state}",
    "status_device": "**Device:** {device}, {dtype}",
    "status_vocoder": "**Vocoder:** {vocoder}",
    "status_engine": "**Engine:** {engine}",
    "status_engine_because": "**Engine:** {engine} ({reason})",
    "status_precision": "**Precision:** {reasons}",
    "status_vocoder_torch_because": "**Vocoder:** PyTorch (Core ML is not used: {reason})",
    "vocoder_label": "Vocoder",
    "vocoder_info": "Core ML runs the vocoder on the Mac's GPU or Neural Engine (macOS only; converted on first use)",
    "vocoder_torch": "PyTorch (same device as the model)",
    "vocoder_coreml_all": "Core ML: all compute units",
    "vocoder_coreml_cpu_and_gpu": "Core ML: CPU and GPU",
    "vocoder_coreml_cpu_and_ne": "Core ML: CPU and Neural Engine",
    "vocoder_progress": "⏳ Restarting with the new vocoder… {seconds:.0f} s",
    "status_fell_back": "**Device:** {device}, {dtype}, fell back to the CPU: {reason}",
    "status_memory": "**Memory:** process {rss}, device {device_memory}",
    "status_llm_rl": "**LLM:** `{file}`, the reinforcement-tuned weights you downloaded with `--rl` "
    "(`COSYVOICE_LLM=base` uses `llm.pt`)",
    "status_low_memory_on": "**Low-memory mode:** on ({reason}; `COSYVOICE_LOW_MEMORY=0` turns it off)",
    "status_low_memory_off": "**Low-memory mode:** off ({reason}; `COSYVOICE_LOW_MEMORY=1` turns it on)",
    "status_queue": "**Queue:** {waiting} waiting, {running} running",
    "status_cache": "**Speaker cache hit rate:** {rate:.0%} ({hits} of {lookups})",
    "status_error": "**Last error:** {message}",
    "status_voices_problem": "**Saved voices:** ⚠️ {message}.",
    "state_ready": "ready",
    "state_starting": "loading",
    "state_restarting": "restarting",
    "state_error": "failed to start",
    "state_stopped": "stopped",
    "state_closed": "shut down",
    "state_unresponsive": "⚠️ the model is not answering (it is restarted if it stays silent)",
    "not_known": "not known yet",
    "not_applicable": "none",
}

ZH: dict[str, str] = {
    # page
    "title": "CosyVoice（Mac 版）",
    "subtitle": "用几秒钟的录音克隆一个声音，让它说任何话，全部在这台电脑上完成。",
    "language_label": "界面语言",
    "notice": "**只克隆你有权使用的声音。** 请先征得说话人同意，不要把结果冒充为其本人的声音。"
    "本应用写出的每个文件都会在元数据中记录生成它的软件、模型和设置。",
    "notice_ok": "我已了解",
    "no_model": "**尚未安装模型。** 用下面的命令下载一个（约 5 GB）：\n\n"
    "`bash run.sh download cosyvoice3`\n\n"
    "（或 `bash run.sh download cosyvoice2`），然后重新启动本应用。",
    "no_model_preview": "在此之前由**预览声音**朗读：它只是近似参考音频的声音，并不是真正的克隆。",
    # voice
    "section_voice": "### 1. 声音",
    "prompt_audio_label": "参考音频：3–30 秒清晰的语音（WAV、MP3、FLAC 或 M4A；上传或录音）",
    "prompt_duration": "参考音频：{seconds:.1f} 秒（语音 {speech:.1f} 秒）。",
    "prompt_too_long": "⚠️ 参考音频含 {speech:.1f} 秒语音，模型最多接受 {limit:g} 秒。"
    "请剪成一两句清晰的话（5–15 秒就足够）。",
    "prompt_too_short": "⚠️ 参考音频只有 {speech:.1f} 秒声音，至少需要 {limit:g} 秒（3–10 秒清晰语音最好）。"
    "请录一段更长的。",
    "prompt_not_audio": "⚠️ {name} 不是本应用能读取的音频文件。请使用 WAV、MP3、FLAC 或 M4A。",
    "prompt_empty": "⚠️ {name} 是一个空文件（0 字节）。请重新录制或导出。",
    "prompt_missing": "⚠️ 服务器上已经没有 {name} 了（上传的文件只保留一段时间）。请重新上传。",
    "prompt_invalid_samples": "⚠️ {name} 含有无效的采样值（非数值或无穷大）；请重新导出为 WAV 或 FLAC。",
    "prompt_silent": "⚠️ 参考音频没有声音。请检查麦克风后重新录制。",
    "prompt_low_rate": "⚠️ {name} 的采样率是 {rate} 赫兹，参考音频至少需要 {limit} 赫兹。"
    "请以 16 千赫或更高的采样率录制或导出。",
    "prompt_no_decoder": "⚠️ {name} 需要系统音频解码器（在 Linux 上是 ffmpeg），但它没有安装。"
    "请安装 ffmpeg，或把文件转换为 WAV 或 FLAC。",
    "prompt_needed": "⚠️ 请上传或录制参考音频，或选择一个已保存的声音。",
    "transcript_label": "参考音频的文字内容",
    "transcript_placeholder": "逐字输入参考录音里说的话",
    "transcribe": "识别文字",
    "transcribe_progress": "⏳ 正在识别参考录音的文字… {seconds:.0f} 秒",
    "transcribe_download": "⏳ 正在下载语音识别模型：{done} / {total}…",
    "transcribe_done": "✅ 已根据录音填入文字。请检查并在需要时修改。",
    "transcribe_empty": "⚠️ 录音中没有识别出文字。请手动输入文字内容。",
    "transcribe_needs_audio": "⚠️ 请先上传或录制参考音频，再识别文字。",
    "transcribe_failed": "⚠️ {message}",
    "transcript_needed": "⚠️ 零样本模式需要参考音频的文字内容。请输入录音里说的话，或改用跨语种模式。",
    "voices_label": "已保存的声音",
    "voices_info": "选择一个已保存的声音，无需再上传参考音频。",
    "voices_none": "（不使用：用上面的参考音频）",
    "voice_in_use": "正在使用已保存的声音“{name}”。",
    "voice_name_label": "为当前参考声音命名",
    "voice_name_placeholder": "例如：爷爷朗读",
    "save_voice": "保存声音",
    "delete_voice": "删除声音",
    "voice_saved": "✅ 已保存声音“{name}”。",
    "voice_deleted": "🗑 已删除声音“{name}”。",
    "voice_save_needs_audio": "⚠️ 请上传或录制要保存为声音的参考音频。",
    "voice_saving": "⏳ 正在准备声音（模型正在提取它的特征）…",
    "voice_save_no_model": "⚠️ 没有运行中的模型，无法准备声音。请看页面顶部的说明。",
    "voice_name_needed": "⚠️ 请为声音输入一个名字。",
    "voice_pick_to_delete": "⚠️ 请先选择要删除的已保存声音。",
    "voice_error": "⚠️ {message}",
    # text
    "section_text": "### 2. 文本",
    "text_label": "要朗读的文本",
    "text_placeholder": "输入希望这个声音说的话",
    "counter": "{count} / {limit} 个字符",
    "counter_over": "⚠️ {count} / {limit} 个字符：太长了，请把文本拆成几次生成。",
    "text_empty": "⚠️ 没有要朗读的文本：请输入一句话。",
    "markup_help": "发音标注（仅 CosyVoice3）：拼音 `[h][ào]`，英语音素 `[M][AY0][N][UW1][T]`；"
    "声音事件 `[breath]` `[laughter]`；重读 `<strong>…</strong>`。",
    "mode_label": "模式",
    "mode_short_zero_shot": "零样本",
    "mode_short_cross_lingual": "跨语种",
    "mode_short_instruct": "指令",
    "mode_zero_shot": "零样本：凭文字内容克隆",
    "mode_cross_lingual": "跨语种：无需文字内容",
    "mode_instruct": "指令：风格、情绪或方言",
    "preset_label": "训练过的指令",
    "preset_info": "选择一条填入指令框，或自己编写。",
    "instruct_label": "指令",
    "instruct_placeholder": "例如：请用四川话表达。",
    "instruct_needed": "⚠️ 指令模式需要一条指令：从菜单中选择，或自己输入。",
    "seed_label": "随机种子",
    "seed_info": "相同的种子和设置会得到相同的音频；🎲 换一个新的。",
    "seed_invalid": "⚠️ 随机种子必须是 0 到 {limit} 之间的整数。",
    "dice_title": "随机选一个种子",
    "speed_label": "语速",
    "stream_label": "边生成边播放",
    "stream_info": "在生成音频的同时播放。",
    "stream_speed_note": "ℹ️ 边生成边播放时语速固定为 1.0。",
    # generate
    "generate": "生成",
    "stop": "停止",
    "result_label": "结果",
    "status_waiting_model": "⏳ 正在等待模型加载…",
    "status_queued": "⏳ 排队中：第 {position} 位。",
    "status_started": "⏳ 正在合成…",
    "status_progress": "⏳ 第 {index} 句，共 {count} 句：{text}",
    "status_retry": "⏳ 设备出错，正在改用处理器重试…",
    "status_streaming": "🔊 正在播放第 {index} 句，共 {count} 句：已生成 {audio:.1f} 秒音频；"
    "首段音频用时 {first:.1f} 秒。",
    "status_stream_summary": "🔊 边生成边播放：首段音频用时 {first:.1f} 秒，全部完成用时 {elapsed:.1f} 秒。",
    "status_done": "✅ 完成：{duration:.1f} 秒音频，用时 {seconds:.1f} 秒，种子 {seed}。已保存为 {file}。",
    "status_done_unsaved": "✅ 完成：{duration:.1f} 秒音频，种子 {seed}。⚠️ 未能保存：{error}",
    "status_failed": "⚠️ 生成失败：{message}",
    "status_cancelled": "⏹ 已停止。",
    "status_interrupted": "⚠️ 未完成：{message}。",
    "status_not_answering": "⚠️ 模型没有响应（已 {seconds:.0f} 秒没有动静）。如果一直没有响应，它会自动重启；"
    "等待中的任务保留原来的位置。",
    "status_busy": "⚠️ 忙碌中：已有 {waiting} 个请求在等待，这是本应用的上限，你的请求将排在第 {position} 位。"
    "本次没有加入队列：请在大约 {seconds} 秒后再试。",
    "status_busy_unknown": "⚠️ 忙碌中：已有 {waiting} 个请求在等待，这是本应用的上限，你的请求将排在第 {position} 位。"
    "本次没有加入队列：请等其中一个完成后再试。",
    "status_no_model": "⚠️ 没有加载模型，无法生成。请看页面顶部的说明。",
    "status_model_error": "⚠️ 模型不可用：{message}。排除原因后请点击“重启模型”。",
    "status_timeout": "⚠️ 模型 {seconds:g} 秒没有响应。请点击“停止”，再点击“重启模型”。",
    "status_invalid": "⚠️ {message}",
    "status_notes": "ℹ️ {notes}",
    "result_preview": "🔶 **{label}**（`{command}`）",
    # history
    "history_label": "历史记录（本次会话，最新的在前）",
    "history_empty": "本次会话还没有生成任何内容。",
    "col_time": "时间",
    "col_text": "文本",
    "col_mode": "模式",
    "col_voice": "声音",
    "col_seed": "种子",
    "col_speed": "语速",
    "col_duration": "秒数",
    "col_model": "模型",
    "col_file": "文件",
    "history_prompt_voice": "上传的参考音频",
    "history_pick_label": "播放之前的结果",
    "history_audio_label": "之前的结果",
    # model status
    "section_model": "### 模型",
    "model_label": "模型",
    "model_info": "在 `models/` 中找到的模型文件夹，或预览声音",
    "preview_choice": "预览声音（近似，无需下载）",
    "preview_label": "预览声音：只是近似匹配。要真正克隆声音，请下载 CosyVoice3",
    "history_preview": "🔶 预览声音：只是近似匹配。要真正克隆声音，请下载 CosyVoice3（`{command}`）",
    "licence_heading": "许可证",
    "licence_cosyvoice": "`CosyVoice2` / `Fun-CosyVoice3` 的权重和本实现：`Apache-2.0` 许可证。",
    "licence_preview": "预览声音：`Piper TTS`（`piper-tts`，`GPL-3.0-or-later`）和 `en_US-joe-medium` 声音"
    "（`CC0`），`WORLD` 声码器（`pyworld`，`MIT`）；中文在安装了 `espeak-ng`"
    "（`GPL-3.0-or-later`）时由它朗读。`Piper` 是本软件包的可选组件（`[preview]`），"
    "核心部分仍采用 `Apache-2.0` 许可证。",
    "restart": "重启模型",
    "restart_progress": "⏳ 正在重启模型… {seconds:.0f} 秒",
    "switch_progress": "⏳ 正在加载 {name}… {seconds:.0f} 秒",
    "restart_done": "✅ 模型已就绪（{seconds:.0f} 秒）。",
    "restart_failed": "⚠️ 模型未能启动：{message}",
    "status_model": "**模型：** {name}（{version}，{model_id}）",
    "status_model_preview": "**模型：** 🔶 {label}（`{command}`）",
    "status_licence": "**许可证：** {licence}",
    "status_state": "**状态：** {state}",
    "status_device": "**设备：** {device}，{dtype}",
    "status_vocoder": "**声码器：** {vocoder}",
    "status_engine": "**引擎：** {engine}",
    "status_engine_because": "**引擎：** {engine}（{reason}）",
    "status_precision": "**精度：** {reasons}",
    "status_vocoder_torch_because": "**声码器：** PyTorch（未使用 Core ML：{reason}）",
    "vocoder_label": "声码器",
    "vocoder_info": "Core ML 在 Mac 的 GPU 或神经网络引擎上运行声码器（仅限 macOS；首次使用时转换）",
    "vocoder_torch": "PyTorch（与模型同一设备）",
    "vocoder_coreml_all": "Core ML：全部计算单元",
    "vocoder_coreml_cpu_and_gpu": "Core ML：CPU 与 GPU",
    "vocoder_coreml_cpu_and_ne": "Core ML：CPU 与神经网络引擎",
    "vocoder_progress": "⏳ 正在用新的声码器重启… {seconds:.0f} 秒",
    "status_fell_back": "**设备：** {device}，{dtype}，已退回处理器运行：{reason}",
    "status_memory": "**内存：** 进程 {rss}，设备 {device_memory}",
    "status_llm_rl": "**语言模型：** `{file}`，即用 `--rl` 下载的强化学习权重（`COSYVOICE_LLM=base` 改用 `llm.pt`）",
    "status_low_memory_on": "**低内存模式：** 开启（{reason}；`COSYVOICE_LOW_MEMORY=0` 可关闭）",
    "status_low_memory_off": "**低内存模式：** 关闭（{reason}；`COSYVOICE_LOW_MEMORY=1` 可开启）",
    "status_queue": "**队列：** {waiting} 个等待，{running} 个运行中",
    "status_cache": "**说话人缓存命中率：** {rate:.0%}（{lookups} 次中 {hits} 次）",
    "status_error": "**最近的错误：** {message}",
    "status_voices_problem": "**已保存的声音：** ⚠️ {message}。",
    "state_ready": "就绪",
    "state_starting": "加载中",
    "state_restarting": "重启中",
    "state_error": "启动失败",
    "state_stopped": "已停止",
    "state_closed": "已关闭",
    "state_unresponsive": "⚠️ 模型没有响应（如果一直没有响应会自动重启）",
    "not_known": "暂不清楚",
    "not_applicable": "无",
}

# Menu labels of the trained instructions (cosyvoice_mac.frontend.special_tokens.INSTRUCTIONS), by preset label.
PRESET_LABELS_ZH: dict[str, str] = {
    "Cantonese dialect": "粤语（广东话）",
    "Northeastern dialect": "东北话",
    "Gansu dialect": "甘肃话",
    "Guizhou dialect": "贵州话",
    "Henan dialect": "河南话",
    "Hubei dialect": "湖北话",
    "Hunan dialect": "湖南话",
    "Jiangxi dialect": "江西话",
    "Minnan dialect": "闽南话",
    "Ningxia dialect": "宁夏话",
    "Shanxi dialect": "山西话",
    "Shaanxi dialect": "陕西话",
    "Shandong dialect": "山东话",
    "Shanghainese": "上海话",
    "Sichuan dialect": "四川话",
    "Tianjin dialect": "天津话",
    "Yunnan dialect": "云南话",
    "Very loud": "非常大声",
    "Very soft": "非常轻柔",
    "Very slow": "非常慢",
    "Very fast": "非常快",
    "Very happy": "非常开心",
    "Very sad": "非常伤心",
    "Very angry": "非常生气",
    "Peppa Pig style": "小猪佩奇风格",
    "Robot style": "机器人风格",
}

EN.update(LONGFORM_EN)
ZH.update(LONGFORM_ZH)
TABLES = {"en": EN, "zh": ZH}
# Characters Markdown or HTML would read as markup; each becomes its numeric character reference, which
# renders as the character itself.
_MARKUP_CHARACTERS = {ord(char): f"&#{ord(char)};" for char in "&<>\\`*_[]|~#!"}


class Markup(str):
    """Text that is already Markdown of ours (an entry of the tables): ``text`` does not escape it again."""


def escape(value: object) -> str:
    """``value`` as text that Markdown and HTML show literally (numbers and Markup pass unchanged)."""
    if isinstance(value, (Markup, int, float)):
        return value
    return str(value).translate(_MARKUP_CHARACTERS)


def language(lang: str | None) -> str:
    """``lang`` if it names a table, else the default (a value from the browser is never trusted)."""
    return lang if lang in TABLES else DEFAULT_LANGUAGE


def text(lang: str | None, key: str, **values) -> str:
    """The entry ``key`` in ``lang`` (English when ``lang`` is unknown), formatted with ``values``."""
    entry = TABLES[language(lang)][key]
    return Markup(entry.format(**{name: escape(value) for name, value in values.items()}) if values else entry)


def preset_label(lang: str | None, english_label: str) -> str:
    """The menu label of one trained instruction."""
    return PRESET_LABELS_ZH[english_label] if language(lang) == "zh" else english_label
