"""The words of the page's action bar, voice cards, history and model downloads, in English and Chinese
(merged into the page's two tables by ``strings.py``; the same keys in both, ``tests/test_webui_strings.py``)."""

from __future__ import annotations

EN: dict[str, str] = {
    # action bar
    "ready_to_generate": "✅ Ready: press Generate.",
    "action_running": "⏳ Your job is running; Stop stops it.",
    "action_model_loading": "⏳ The model is loading; a job waits until it is ready.",
    "action_model_restarting": "⏳ The model is restarting; a job waits until it is ready.",
    "action_model_unresponsive": "⚠️ The model is not answering; it is restarted if it stays silent.",
    "action_model_failed": "⚠️ The model failed to start: see the model panel, then press Restart model.",
    "transcript_checking": "⏳ Checking the transcript against the recording…",
    "transcript_agrees": "✅ The transcript matches the recording.",
    "transcript_mismatch": "⚠️ The transcript does not seem to match the recording, which sounds like: “{heard}”. "
    "Correct the transcript (or press Transcribe), or zero-shot mode will read the wrong words with the voice.",
    "notice_short": "🔒 Only clone voices you have the right to use.",
    "advanced_heading": "Advanced: engine, MLX precision and vocoder",
    "queue_empty": "Queue: nothing waiting or running.",
    "queue_running": "running",
    "queue_place": "waiting, number {place}",
    "queue_yours": "▶ {where}: yours, “{text}” (Stop stops it; closing this tab cancels it)",
    "queue_other": "· {where}: another job ({interface})",
    # voice cards
    "voice_card_seconds": "{seconds:.1f} s",
    "voice_card_transcript": "“{transcript}”",
    "voice_card_no_transcript": "No transcript: this voice speaks cross-lingual or instruct. Transcribe it or "
    "type what it says, then press Save transcript, to use zero-shot.",
    "voice_list_empty": "No saved voices yet.",
    "voice_col_transcript": "Transcript",
    "voice_exists_replace": "⚠️ A voice named “{name}” already exists. Replace its recording and transcript with "
    "these? This cannot be undone.",
    "voice_replace_yes": "Replace it",
    "voice_replace_no": "Keep the old one",
    "voice_replaced": "✅ Replaced the voice “{name}”.",
    "voice_saved_no_transcript": "ℹ️ Saved without a transcript, so it speaks cross-lingual only: press Transcribe "
    "(or type what it says), then Save transcript under Manage voice, to use zero-shot.",
    "voice_manage_heading": "Manage the picked voice: rename, transcript, all voices",
    "voice_rename_label": "New name",
    "voice_rename": "Rename",
    "voice_renamed": "✅ Renamed “{old}” to “{name}”.",
    "voice_name_taken": "⚠️ A voice named “{name}” already exists; pick another name.",
    "voice_pick_to_rename": "⚠️ Pick a saved voice to rename.",
    "voice_pick_first": "⚠️ Pick a saved voice first.",
    "voice_save_transcript": "Save transcript",
    "voice_transcript_saved": "✅ Saved the transcript of “{name}”: it can speak zero-shot now.",
    "voice_transcript_removed": "✅ “{name}” has no transcript now: it speaks cross-lingual only.",
    # history
    "history_heading": "History",
    "history_search_label": "Search",
    "history_search_placeholder": "words of the text, or a voice's name",
    "history_prev": "◀",
    "history_next": "▶",
    "history_none": "Nothing here yet: every result you make is listed here and kept in outputs/.",
    "history_page": "Page {page} of {pages} ({count} results)",
    "history_page_one": "Page {page} of {pages} ({count} result)",
    "history_preview_badge": "🔶 Rows marked 🔶 were made by the {label} (`{command}`).",
    "history_preview_short": "preview",
    "history_reuse": "Use these settings again",
    "history_clear": "Clear history",
    "history_clear_question": "Hide every result listed now? The files stay in outputs/.",
    "history_clear_yes": "Clear",
    "history_was_cleared": "🗑 History cleared; the files are still in outputs/.",
    "history_pick_first": "⚠️ Click a result in the table first.",
    "history_reused": "✅ The result's text, mode, voice, seed and speed are back in the form.",
    "history_reused_upload": "✅ The result's text, mode, seed and speed are back in the form. It was made with an "
    "uploaded prompt, which is not kept: upload it again or pick a saved voice.",
    "history_reused_voice_gone": "✅ The result's text, mode, seed and speed are back in the form. Its voice "
    "“{name}” is no longer saved: pick another one.",
    # model downloads
    "dl_heading": "Download a model",
    "dl_info": "Into models/, with the same download as `bash run.sh download`: an interrupted one resumes where "
    "it stopped; Hugging Face first, ModelScope when it cannot be reached. The page switches to the new model "
    "when it is complete, without a restart.",
    "dl_button": "Download {name}",
    "dl_bytes": "{done} of {total}",
    "dl_speed": "{speed}/s",
    "dl_left": "about {minutes} min {seconds} s left",
    "dl_from_huggingface": "from Hugging Face",
    "dl_from_modelscope": "from ModelScope",
    "dl_resumed": "resumed with {done} already there",
    "dl_done": "✅ Downloaded {name}; switching to it.",
    "dl_failed": "⚠️ The download stopped: {message}.",
    "dl_again": "Press the download button again: it resumes where it stopped.",
    "dl_offline": "⚠️ No model could be downloaded: neither Hugging Face nor ModelScope answered (tried in that "
    "order). Check the internet connection, then press the download button again. A model folder copied into "
    "models/ works too.",
    "dl_unknown": "⚠️ Unknown model.",
}

ZH: dict[str, str] = {
    # action bar
    "ready_to_generate": "✅ 已就绪：请按“生成”。",
    "action_running": "⏳ 你的任务正在运行；按“停止”可停止。",
    "action_model_loading": "⏳ 模型正在加载；任务会等到它就绪。",
    "action_model_restarting": "⏳ 模型正在重启；任务会等到它就绪。",
    "action_model_unresponsive": "⚠️ 模型没有应答；若一直没有应答会自动重启。",
    "action_model_failed": "⚠️ 模型未能启动：请查看模型面板，然后按“重启模型”。",
    "transcript_checking": "⏳ 正在把文字稿与录音对照…",
    "transcript_agrees": "✅ 文字稿与录音一致。",
    "transcript_mismatch": "⚠️ 文字稿似乎与录音不符，录音听起来是：“{heard}”。请改正文字稿（或按“识别文字”），"
    "否则零样本模式会用这个声音读出错误的内容。",
    "notice_short": "🔒 只克隆你有权使用的声音。",
    "advanced_heading": "高级：引擎、MLX 精度与声码器",
    "queue_empty": "队列：没有等待或正在运行的任务。",
    "queue_running": "正在运行",
    "queue_place": "等待中，第 {place} 位",
    "queue_yours": "▶ {where}：你的任务，“{text}”（按“停止”可停止；关闭此标签页会取消它）",
    "queue_other": "· {where}：其他任务（{interface}）",
    # voice cards
    "voice_card_seconds": "{seconds:.1f} 秒",
    "voice_card_transcript": "“{transcript}”",
    "voice_card_no_transcript": "没有文字稿：这个声音只能用跨语种或指令模式。先识别或输入录音的内容，再按“保存文字稿”，"
    "即可使用零样本模式。",
    "voice_list_empty": "还没有保存的声音。",
    "voice_col_transcript": "文字稿",
    "voice_exists_replace": "⚠️ 已有名为“{name}”的声音。要用现在的录音和文字稿替换它吗？替换后无法恢复。",
    "voice_replace_yes": "替换",
    "voice_replace_no": "保留原来的",
    "voice_replaced": "✅ 已替换声音“{name}”。",
    "voice_saved_no_transcript": "ℹ️ 保存时没有文字稿，所以只能用跨语种模式：按“识别文字”（或输入录音的内容），"
    "再在“管理声音”中按“保存文字稿”，即可使用零样本模式。",
    "voice_manage_heading": "管理所选声音：改名、文字稿、全部声音",
    "voice_rename_label": "新名称",
    "voice_rename": "改名",
    "voice_renamed": "✅ 已把“{old}”改名为“{name}”。",
    "voice_name_taken": "⚠️ 已有名为“{name}”的声音，请换一个名称。",
    "voice_pick_to_rename": "⚠️ 请先选择要改名的已保存声音。",
    "voice_pick_first": "⚠️ 请先选择一个已保存的声音。",
    "voice_save_transcript": "保存文字稿",
    "voice_transcript_saved": "✅ 已保存“{name}”的文字稿：现在可以使用零样本模式。",
    "voice_transcript_removed": "✅ “{name}”现在没有文字稿：只能用跨语种模式。",
    # history
    "history_heading": "历史记录",
    "history_search_label": "搜索",
    "history_search_placeholder": "文本中的词语，或声音的名称",
    "history_prev": "◀",
    "history_next": "▶",
    "history_none": "这里还没有内容：生成的每个结果都会列在这里，并保存在 `outputs/` 中。",
    "history_page": "第 {page} 页，共 {pages} 页（{count} 个结果）",
    "history_page_one": "第 {page} 页，共 {pages} 页（{count} 个结果）",
    "history_preview_badge": "🔶 标有 🔶 的行由{label}生成（`{command}`）。",
    "history_preview_short": "预览声音",
    "history_reuse": "再次使用这些设置",
    "history_clear": "清除历史记录",
    "history_clear_question": "隐藏现在列出的所有结果吗？文件仍保留在 `outputs/` 中。",
    "history_clear_yes": "清除",
    "history_was_cleared": "🗑 历史记录已清除；文件仍在 `outputs/` 中。",
    "history_pick_first": "⚠️ 请先在表格中点击一条结果。",
    "history_reused": "✅ 该结果的文本、模式、声音、种子和语速已填回表单。",
    "history_reused_upload": "✅ 该结果的文本、模式、种子和语速已填回表单。它使用的是上传的参考音频，该音频没有保留："
    "请重新上传，或选择一个已保存的声音。",
    "history_reused_voice_gone": "✅ 该结果的文本、模式、种子和语速已填回表单。"
    "它的声音“{name}”已不再保存：请另选一个。",
    # model downloads
    "dl_heading": "下载模型",
    "dl_info": "下载到 `models/`，与 `bash run.sh download` 相同：中断后会从停下的地方继续；先用 Hugging Face，"
    "连不上时改用 ModelScope。下载完成后页面会切换到新模型，无需重启。",
    "dl_button": "下载 {name}",
    "dl_bytes": "{done} / {total}",
    "dl_speed": "{speed}/秒",
    "dl_left": "约剩 {minutes} 分 {seconds} 秒",
    "dl_from_huggingface": "来自 Hugging Face",
    "dl_from_modelscope": "来自 ModelScope",
    "dl_resumed": "续传，已有 {done}",
    "dl_done": "✅ 已下载 {name}，正在切换到它。",
    "dl_failed": "⚠️ 下载中断：{message}。",
    "dl_again": "再按一次下载按钮：会从停下的地方继续。",
    "dl_offline": "⚠️ 无法下载模型：先后尝试了 Hugging Face 和 ModelScope，都没有应答。请检查网络连接，然后再按一次"
    "下载按钮。也可以把模型文件夹直接复制到 models/ 中。",
    "dl_unknown": "⚠️ 未知的模型。",
}
