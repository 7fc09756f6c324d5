"""The words of the page's workspaces (Speak, Convert, Long form, Voices, History), their action rows, the
transcript check's choices, the history's rows and takes, a long prompt's part and the preview voice's limits said
before a job, in English and Chinese (merged into the page's two tables by ``strings.py``; the same keys in both)."""

from __future__ import annotations

EN: dict[str, str] = {
    "ws_speak": "Speak",
    "ws_convert": "Convert",
    "ws_longform": "Long form",
    "ws_voices": "Voices",
    "ws_history": "History",
    "ws_keys": "Ctrl/⌘+Enter runs this workspace's action; Esc stops it.",
    "action_more": "{count} more",
    "result_heading": "Result",
    "voices_workspace_info": "The voice picked in Speak: rename it, or save the transcript typed there as its "
    "own. Every saved voice is listed below.",
    # the transcript check, as a blocker with its two ways out
    "transcript_use_heard": "Use what I hear",
    "transcript_keep_mine": "Keep mine",
    "transcript_blocker": "⚠️ The transcript does not match the recording, which sounds like: “{heard}”. Choose "
    "“Use what I hear” or “Keep mine” (under the transcript).",
    "transcript_kept": "ℹ️ Kept your transcript; it is not checked again for this recording.",
    # the preview voice, before a job
    "preview_ignores_instruction": "ℹ️ The preview voice cannot follow instructions: this one will be ignored "
    "(download CosyVoice3 for instruct mode).",
    "preview_ignores_markup": "ℹ️ The preview voice does not understand markup such as {example}: it will be left out.",
    # history rows
    "history_row_hint": "Click a row to play it; “Use these settings again” puts its settings back in Speak. The "
    "takes of one line (the same text, voice and mode) are listed together, newest first.",
    "history_picked_row": "▶ {name}",
    "history_take_first": "{text} · take {number} of {count}",
    "history_take": "↳ take {number} of {count}",
    # a long prompt
    "prompt_trim_offer": "Use the clearest {seconds:.0f} s",
    "prompt_trimmed": "✅ Kept the clearest {seconds:.1f} s of the recording ({start:.1f}-{end:.1f} s of "
    "{total:.1f} s); move the selection on its waveform to use another part.",
    "prompt_trim_failed": "⚠️ No clear {seconds:.0f} s span was found in the recording: record a shorter clip.",
    "prompt_span_chosen": "✅ Kept the part you chose: {seconds:.1f} s ({start:.1f}-{end:.1f} s of {total:.1f} s).",
    "prompt_span_hint": "The whole recording, the part in use selected: drag the selection to move it, or an edge "
    "to change its length (3-30 s); ← and → move it too.",
}

ZH: dict[str, str] = {
    "ws_speak": "朗读",
    "ws_convert": "变声",
    "ws_longform": "长篇",
    "ws_voices": "声音库",
    "ws_history": "历史记录",
    "ws_keys": "Ctrl/⌘+回车 运行本页的操作；Esc 停止。",
    "action_more": "还有 {count} 条",
    "result_heading": "结果",
    "voices_workspace_info": "在“朗读”中选中的声音：可改名，或把那里输入的文字稿存为它的文字稿。"
    "下面列出全部已保存的声音。",
    "transcript_use_heard": "用识别出的文字",
    "transcript_keep_mine": "保留我的",
    "transcript_blocker": "⚠️ 文字稿与录音不符，录音听起来是：“{heard}”。"
    "请选择“用识别出的文字”或“保留我的”（在文字稿下方）。",
    "transcript_kept": "ℹ️ 已保留你的文字稿；这段录音不再重复检查。",
    "preview_ignores_instruction": "ℹ️ 预览声音无法按指令说话：这条指令会被忽略（下载 CosyVoice3 才能使用指令模式）。",
    "preview_ignores_markup": "ℹ️ 预览声音不理解 {example} 这类标记：它们会被略过。",
    "history_row_hint": "点击一行即可播放；“再次使用这些设置”会把它的设置放回“朗读”。"
    "同一句（相同的文本、声音和模式）的各条排在一起，最新的在前。",
    "history_picked_row": "▶ {name}",
    "history_take_first": "{text} · 第 {number} 条（共 {count} 条）",
    "history_take": "↳ 第 {number} 条（共 {count} 条）",
    "prompt_trim_offer": "使用最清晰的 {seconds:.0f} 秒",
    "prompt_trimmed": "✅ 已保留录音中最清晰的 {seconds:.1f} 秒（共 {total:.1f} 秒中的 {start:.1f}-{end:.1f} 秒）；"
    "在波形上移动选区可改用别的部分。",
    "prompt_trim_failed": "⚠️ 录音中找不到清晰的 {seconds:.0f} 秒片段：请录一段更短的。",
    "prompt_span_chosen": "✅ 已保留你选的部分：{seconds:.1f} 秒（共 {total:.1f} 秒中的 {start:.1f}-{end:.1f} 秒）。",
    "prompt_span_hint": "整段录音，选中的是正在使用的部分：拖动选区可移动它，拖动两端可改变长度（3-30 秒）；"
    "← 和 → 键也能移动。",
}
