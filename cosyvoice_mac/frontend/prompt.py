"""Prompt audio as upstream reads it (``load_wav``) and the 1:2 alignment of prompt speech tokens and
prompt mel frames."""

from __future__ import annotations

from pathlib import Path

import torch

from cosyvoice_mac.errors import SynthesisError
from cosyvoice_mac.frontend.prompt_audio import decode_audio
from cosyvoice_mac.frontend.resample import resample
from cosyvoice_mac.sound.problems import AudioInputError
from cosyvoice_mac.sound.read import check_source_rate

MEL_FRAMES_PER_TOKEN = 2


def load_wav(path: str | Path, target_sr: int) -> torch.Tensor:
    """Read an audio file as ``(1, N)`` float32 mono in [-1, 1] at ``target_sr`` Hz.

    Like upstream ``load_wav``: the file's normalised float samples (read by the worker's own reader,
    ``prompt_audio.decode_audio``), mean over channels, then the default torchaudio-equal resampler. Files
    below 16 kHz are refused (SynthesisError), as upstream does, because the prompt features need the band
    up to 8 kHz.
    """
    try:
        mono, file_sr = decode_audio(path)
        check_source_rate(Path(path).name, file_sr, target_sr)
    except AudioInputError as error:
        raise SynthesisError(f"cannot read prompt audio {path}: {error}", field="prompt_audio") from error
    return resample(mono, file_sr, target_sr)


def align_prompt(tokens: torch.Tensor, mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Trim prompt tokens ``(1, T_tok)`` and prompt mel ``(1, T_mel, 80)`` to ``n`` and ``2n``.

    ``n = min(T_mel // 2, T_tok)``: one 25 Hz token covers exactly two 50 Hz mel frames, and
    both ends of the prompt are cut at the same instant. Used for zero-shot, cross-lingual and
    instruct prompts (voice conversion does not align).
    """
    if tokens.dim() != 2 or mel.dim() != 3 or tokens.shape[0] != mel.shape[0]:
        raise ValueError(
            f"align_prompt needs tokens (B, T_tok) and mel (B, T_mel, C), got {tuple(tokens.shape)} and "
            f"{tuple(mel.shape)}"
        )
    count = min(mel.shape[1] // MEL_FRAMES_PER_TOKEN, tokens.shape[1])
    return tokens[:, :count], mel[:, : MEL_FRAMES_PER_TOKEN * count]
