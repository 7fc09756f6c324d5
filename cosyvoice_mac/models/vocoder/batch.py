"""Several whole lines through one HiFT decoder call, each line's waveform equal to its solo ``HiFT.inference``.

Per line, as alone: the f0 predictor, the harmonic source (with the line's own noise: CosyVoice2's is seeded per
sentence) and the source's STFT, whose reflect padding at the line's end only the line itself can give. Batched:
the decoder's convolution stack, the costly part, over the mels and spectra padded at their end with zeros; after
every convolution each line's padding is zeroed again (``HiFT.decoder_features``'s ``keep``), so a non-causal
CosyVoice2 convolution reads zeros past a line's end exactly as the line alone reads its zero padding (CosyVoice3's
causal ones never look past it). Per line again: the inverse STFT of the line's own frames.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from .hift import HiFT
from .source import SourceNoise


@torch.inference_mode()
def vocode_batch(hift: HiFT, mels: Sequence[torch.Tensor], noises: Sequence[SourceNoise | None]) -> list[torch.Tensor]:
    """mels ``(1, 80, T_i)`` with their source noises (None: the vocoder's default) -> waveforms ``(1, 480 T_i)``,
    float32 on the vocoder's device: what ``hift.inference(mel, noise=noise)[0]`` gives each, up to rounding.

    Lines too long for the device's convolution limit (MPS) run alone, in the windows ``inference`` plans.
    """
    limit = hift.active_conv_limit()
    step = hift.config.samples_per_frame
    if limit is not None and max(mel.shape[-1] for mel in mels) * step > limit:
        return [hift.inference(mel, noise=noise)[0] for mel, noise in zip(mels, noises)]
    weight = hift.conv_pre.weight
    checked = [hift._checked_mel(mel, True).to(weight.device, weight.dtype) for mel in mels]
    spectra = []
    for mel, noise in zip(checked, noises):
        source = hift.m_source(
            hift.f0_predictor(mel, finalize=True), noise if noise is not None else hift.default_noise
        )
        spectra.append(hift.stft.stft(source[:, 0]))
    lengths = [mel.shape[-1] for mel in checked]
    longest = max(lengths)
    frames = torch.tensor(lengths, device=weight.device)

    def keep(activation: torch.Tensor, factor: int) -> torch.Tensor:
        # The activation spans longest * factor positions plus what the stage adds (the STFT's one extra frame).
        valid = frames * factor + (activation.shape[-1] - longest * factor)
        padding = torch.arange(activation.shape[-1], device=activation.device)[None, :] >= valid[:, None]
        return activation.masked_fill(padding[:, None, :], 0.0)

    mel = torch.cat([F.pad(mel, (0, longest - mel.shape[-1])) for mel in checked])
    widest = max(spectrum.shape[-1] for spectrum in spectra)
    spectrum = torch.cat([F.pad(line, (0, widest - line.shape[-1])) for line in spectra])
    features = hift.decoder_features(mel, spectrum, keep=keep)
    return [hift.waveform(features[i : i + 1, :, : spectra[i].shape[-1]]) for i in range(len(checked))]
