"""The Convert section's words (voice conversion), in English and Chinese (merged into the page's two tables).

``vc_problem_*`` say what can be wrong with a recording to convert; their English is ``sound.problems``'s
sentence for the same problem (a test keeps them equal), so the page, the API and the CLI say one thing.
"""

from __future__ import annotations

EN: dict[str, str] = {
    "vc_heading": "Convert: re-speak a recording in another voice",
    "vc_info": "Upload or record someone speaking; the result says the same words with the same timing in the "
    "voice you pick. No text is needed, and the same recording and voice always give the same result.",
    "vc_source_label": "Recording to convert (any length up to 10 minutes)",
    "vc_voice_label": "Target voice (a saved voice)",
    "vc_prompt_label": "... or a recording of the target voice (3-30 s)",
    "vc_speed_label": "Speed (1 keeps the recording's timing)",
    "vc_start": "Convert",
    "vc_stop": "Stop",
    "vc_result_label": "Converted",
    "vc_source_ok": "{seconds:.1f} s recording, {speech:.1f} s of sound.",
    "vc_need_source": "Upload or record the recording to convert first.",
    "vc_need_voice": "Pick a saved voice or give a recording of the target voice (one of the two).",
    "vc_both_voices": "Pick a saved voice or give a recording of the target voice, not both.",
    "vc_no_engine": "The model is not running; press Restart or wait until it has loaded.",
    "vc_queued": "Waiting in the queue (place {position}).",
    "vc_progress": "{done} of {total} pieces converted",
    "vc_done": "Done: {seconds:.1f} s converted in {took:.1f} s.",
    "vc_stopped": "Stopped: nothing was saved.",
    "vc_failed": "The conversion failed: {message}",
    "vc_problem_source_low_rate": "{name} is sampled at {rate} Hz; a recording to convert needs at least "
    "{limit} Hz. Export it at 8 kHz or higher.",
    "vc_problem_source_too_long": "{name} is {seconds:.0f} s long; a recording to convert may be at most "
    "{limit:g} s ({minutes:g} minutes). Cut it into parts and convert each.",
    "vc_problem_no_speech": "{name} holds no speech to convert (only silence, noise or music was heard). "
    "Pick a recording of someone speaking.",
    "vc_problem_too_little_speech": "{name} holds only {speech:.1f} s of speech; converting needs at least "
    "{limit:g} s. Pick a recording with a few words in it.",
    # a conversion in the history
    "mode_short_voice_conversion": "conversion",
    "history_converted": "🔁 converted from {source} ({seconds:.1f} s)",
    "history_reused_conversion": "✅ The Convert section is open with the same voice ({voice}) and speed. The "
    "recording converted ({source}) is not kept: upload it again, then press Convert.",
    "history_reused_conversion_upload": "⚠️ This conversion cannot be repeated from here: its recording ({source}) "
    "and the voice recording it was converted into are not kept. The Convert section is open with its speed: "
    "upload both again, or pick a saved voice.",
    "history_reused_conversion_gone": "⚠️ The Convert section is open with its speed, but its voice “{voice}” is "
    "no longer saved: pick another one, and upload the recording ({source}) again.",
}

ZH: dict[str, str] = {
    "vc_heading": "变声：用另一个声音重新说出一段录音",
    "vc_info": "上传或录制一段说话的录音；结果会以您选择的声音、相同的节奏说出同样的内容。无需输入文字，"
    "同一段录音和同一个声音总是得到相同的结果。",
    "vc_source_label": "要转换的录音（最长 10 分钟）",
    "vc_voice_label": "目标声音（已保存的声音）",
    "vc_prompt_label": "……或目标声音的一段录音（3-30 秒）",
    "vc_speed_label": "语速（1 保持录音原有的节奏）",
    "vc_start": "转换",
    "vc_stop": "停止",
    "vc_result_label": "转换结果",
    "vc_source_ok": "录音 {seconds:.1f} 秒，其中有声部分 {speech:.1f} 秒。",
    "vc_need_source": "请先上传或录制要转换的录音。",
    "vc_need_voice": "请选择一个已保存的声音，或提供目标声音的录音（二选一）。",
    "vc_both_voices": "请选择一个已保存的声音或提供目标声音的录音，不要同时提供。",
    "vc_no_engine": "模型没有在运行；请点击重启，或等待模型加载完成。",
    "vc_queued": "正在排队（第 {position} 位）。",
    "vc_progress": "已转换 {done} / {total} 段",
    "vc_done": "完成：转换了 {seconds:.1f} 秒，用时 {took:.1f} 秒。",
    "vc_stopped": "已停止：没有保存任何文件。",
    "vc_failed": "转换失败：{message}",
    "vc_problem_source_low_rate": "{name} 的采样率为 {rate} 赫兹；要转换的录音至少需要 {limit} 赫兹。"
    "请以 8 千赫或更高的采样率导出。",
    "vc_problem_source_too_long": "{name} 长 {seconds:.0f} 秒；要转换的录音最长 {limit:g} 秒（{minutes:g} 分钟）。"
    "请分成几段分别转换。",
    "vc_problem_no_speech": "{name} 中没有可转换的语音（只听到静音、噪声或音乐）。请选择一段有人说话的录音。",
    "vc_problem_too_little_speech": "{name} 中只有 {speech:.1f} 秒语音；转换至少需要 {limit:g} 秒。"
    "请选择包含几句话的录音。",
    "mode_short_voice_conversion": "变声",
    "history_converted": "🔁 由 {source} 转换（{seconds:.1f} 秒）",
    "history_reused_conversion": "✅ 已打开变声区，声音（{voice}）和语速与该结果相同。被转换的录音（{source}）"
    "没有保留：请重新上传，然后点击转换。",
    "history_reused_conversion_upload": "⚠️ 这次变声无法在这里重做：它的录音（{source}）和目标声音的录音都没有保留。"
    "已打开变声区并填回语速：请重新上传两者，或选择一个已保存的声音。",
    "history_reused_conversion_gone": "⚠️ 已打开变声区并填回语速，但它的声音“{voice}”已不再保存：请另选一个，"
    "并重新上传录音（{source}）。",
}
