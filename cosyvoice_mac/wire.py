"""What this server and its own clients (the command line's ``synth``) agree on beyond OpenAI's API.

Light on purpose (no FastAPI, no Gradio): the CLI imports it to talk to a running app.

- ``X-CosyVoice-Interface``: which interface asked, for the output's sidecar. A ``/v1`` request without it
  is recorded as ``api``; a client may claim only a name in ``CLIENT_INTERFACES`` (anything else is a 400).
- ``X-CosyVoice-Saved: true|false``: whether the result was saved in the app's outputs/ (a whole answer;
  a stream's last SSE event says ``saved`` instead). With ``false`` a ``Warning: 199 - "reason"`` header
  (RFC 7234's form) says why; the audio is in the answer either way.
- ``POST /v1/audio/speech/recording``: the speech request as multipart: the field ``body`` holds the JSON
  of ``/v1/audio/speech`` without ``voice``, the file ``prompt_audio`` the recording to speak in (the
  server keeps it in a temporary folder of its own until the job is over; no request names a path).
"""

from __future__ import annotations

KEY_VARIABLE = "COSYVOICE_API_KEY"  # the API key, for the server (when not given as --api-key) and the CLI
INTERFACE_HEADER = "X-CosyVoice-Interface"
CLIENT_INTERFACES = ("api", "cli")  # the page and the Gradio API record themselves in their own code
SPEECH_PATH = "/v1/audio/speech"
RECORDING_SPEECH_PATH = "/v1/audio/speech/recording"
TIMESTAMPS_SPEECH_PATH = "/v1/audio/speech/with-timestamps"  # JSON: audio_base64, alignment (ElevenLabs'), words
CONVERSION_PATH = "/v1/audio/voice-conversion"  # multipart: audio (the recording to re-speak), voice or prompt_audio
MODELS_PATH = "/v1/models"
VOICES_PATH = "/v1/voices"
VOICES_IMPORT_PATH = "/v1/voices/import"  # POST multipart: file (a voices file); its own body limit
GLOSSARY_PATH = "/v1/glossary"  # GET: {"data": [{key, replacement, language}, ...]}; PUT {"entries": [...]}
JOB_ID_HEADER = "x-cosyvoice-job-id"
FILE_HEADER = "x-cosyvoice-file"
SAVED_HEADER = "x-cosyvoice-saved"
WARNING_HEADER = "warning"
CHECK_HEADER = "x-cosyvoice-check"  # the take check: passed, retaken or flagged (absent: not checked)
CHECK_NOTE_HEADER = "x-cosyvoice-check-note"  # what a retake or a flag was about, in plain words
