"""The text-to-speech pipeline: model folder -> CosyVoice -> typed results."""

from cosyvoice_mac.pipeline.types import SAMPLE_RATE, SpeakerPrompt, SynthesisError, SynthesisResult


def __getattr__(name):
    # CosyVoice pulls in torch models; import it only when asked so the UI process stays light.
    if name == "CosyVoice":
        from cosyvoice_mac.pipeline.cosyvoice import CosyVoice

        return CosyVoice
    raise AttributeError(name)


__all__ = ["CosyVoice", "SAMPLE_RATE", "SpeakerPrompt", "SynthesisError", "SynthesisResult"]
