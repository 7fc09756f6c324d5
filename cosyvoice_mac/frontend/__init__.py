"""Frontend: text (glossary, normalisation, splitting, markup, tokenizer) and prompt audio (features,
speech tokens, speaker vector, voice activity, transcription).

Text side: :mod:`.glossary` (the user's pronunciation glossary, applied to every request),
:mod:`.special_tokens` (token lists, instruction presets), :mod:`.tokenizer` (:class:`SpeechTextTokenizer`),
:mod:`.text` (:class:`TextNormalizer`), :mod:`.markup` (:func:`validate_markup`, :func:`build_llm_text`).
Import submodules directly; this package imports nothing heavy on its own.
"""
