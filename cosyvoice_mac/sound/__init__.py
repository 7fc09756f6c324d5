"""Sound without torch: the rules every process shares about audio, written once.

``limits`` (what a voice prompt must be), ``problems`` (the one sentence per prompt problem),
``read`` (the one reader of recording files), ``prompt_check`` (the quick look the page, the API and the
CLI take before any work is queued), ``silence`` (where the sound is), ``post`` (trim and loudness of a
finished waveform) and ``wav`` (float samples as 16-bit PCM and WAV bytes). numpy, soundfile, audioread
and pyloudnorm only: the page and API processes import these and never torch.
"""
