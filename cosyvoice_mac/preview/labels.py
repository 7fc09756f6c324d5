"""What the UI, CLI and outputs say about the preview engine and each backend's licence.

Plain strings only (no torch, no Piper import), so the UI process can show them cheaply.
"""

from __future__ import annotations

PREVIEW = "preview"  # the preview voice's version, backend and voice name, wherever a user or a client names it
PREVIEW_LABEL = "Preview voice: approximate match. Download CosyVoice3 for real cloning"
DOWNLOAD_COMMAND = "bash run.sh download cosyvoice3"
PREVIEW_EXPLANATION = (
    "No CosyVoice model is installed, so a stock voice (Piper for English, espeak-ng for Chinese) speaks the "
    "text and a WORLD vocoder moves its pitch, spectral envelope and formants toward the prompt voice. "
    "Rhythm, accent and style are not copied. For real voice cloning, download CosyVoice3 (4-5 GB): " + DOWNLOAD_COMMAND
)
PREVIEW_NOTE = f"{PREVIEW_LABEL} ({DOWNLOAD_COMMAND})"

LICENSE_NOTE = (
    "Preview voice: Piper TTS (piper-tts, GPL-3.0-or-later) with the en_US-joe-medium voice (CC0), "
    "WORLD vocoder (pyworld, MIT); Mandarin through espeak-ng (GPL-3.0-or-later) when installed. "
    "Piper is an optional extra of this package ([preview]); the core stays Apache-2.0."
)
COSYVOICE_LICENSE_NOTE = "CosyVoice2 / Fun-CosyVoice3 weights and this implementation: Apache-2.0."
BACKEND_LICENSES = {"cosyvoice": COSYVOICE_LICENSE_NOTE, PREVIEW: LICENSE_NOTE}
