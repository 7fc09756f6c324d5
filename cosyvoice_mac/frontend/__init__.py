"""Frontend: text (normalisation, splitting, markup, tokenizer) and prompt-audio features.

Text side: :mod:`.special_tokens` (token lists, instruction presets), :mod:`.tokenizer`
(:class:`SpeechTextTokenizer`), :mod:`.text` (:class:`TextNormalizer`), :mod:`.markup`
(:func:`validate_markup`, :func:`build_llm_text`). Import submodules directly; this package imports
nothing heavy on its own.
"""
