"""Several non-streamed requests spoken together: what long-form jobs (line batches, dialogue, dubbing) hand a model.

The speech LM decodes the requests' sentences as one batch (``models/llm/batch_decoding``: each line keeps its
own sampler, so its tokens are the ones it gets alone with the same seed) and the flow samples them as one batch
with the padding masked (``Flow.inference_batch``), and so does the vocoder (``models/vocoder/batch.py``: its
convolution stack batched, each line's padding zeroed after every convolution). Each line's audio therefore equals
its solo ``CosyVoice.run`` within the parity tolerances (tests/test_batched_parity.py).

A request of several sentences keeps one sampler across them, as alone, so its sentences go in successive
rounds: round ``k`` decodes sentence ``k`` of every request in the group that has one. A line whose input is
bad fails alone (its error takes its place in the results); the others go on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from cosyvoice_mac.models.llm import SpeechLM, SpeechLMInputError, decode_batch, filter_silent_runs
from cosyvoice_mac.models.llm.sampling import RasSampler
from cosyvoice_mac.models.vocoder.batch import vocode_batch
from cosyvoice_mac.pipeline import prompts
from cosyvoice_mac.pipeline.types import SpeakerPrompt, SynthesisError, SynthesisResult
from cosyvoice_mac.request import Request
from cosyvoice_mac.settings import env_value, out_of_range

if TYPE_CHECKING:
    from cosyvoice_mac.pipeline.cosyvoice import CosyVoice

CPU_BATCH, DEVICE_BATCH, LOW_MEMORY_BATCH = 4, 16, 2  # see batch_size_for


def batch_size_for(device: torch.device, low_memory: bool) -> int:
    """Lines spoken at once: the ``batch_lines`` setting when set, else what ``device`` suits. A decoding step
    reads every LLM weight once whatever the batch, so a GPU (or a Mac's unified memory) gains up to many lines;
    a CPU's step turns arithmetic-bound sooner; the low-memory mode keeps its KV caches and activations small."""
    configured = env_value("batch_lines")
    if configured is not None:
        try:
            value = int(configured)
        except ValueError:
            raise SynthesisError(f"COSYVOICE_BATCH_LINES must be a whole number, got {configured!r}") from None
        if (why := out_of_range("batch_lines", value)) is not None:
            raise SynthesisError(f"COSYVOICE_BATCH_LINES: {why}")
        return value
    if low_memory:
        return LOW_MEMORY_BATCH
    return CPU_BATCH if device.type == "cpu" else DEVICE_BATCH


@dataclass
class _Line:
    """One request of a batch: its place in the caller's list, its plan, voice, seed and sampler."""

    index: int
    plan: prompts.RequestPlan
    speaker: SpeakerPrompt
    seed: int
    sampler: RasSampler
    frontend_s: float
    failed: bool = False


def run_batch(
    model: CosyVoice,
    requests: Sequence[Request],
    speakers: Sequence[SpeakerPrompt | None],
    should_stop: Callable[[], bool],
    batch_size: int,
) -> Iterator[tuple[int, SynthesisResult | SynthesisError]]:
    """``(request index, result)`` per sentence as each group of ``batch_size`` requests finishes a round, or
    ``(index, SynthesisError)`` once for a request that cannot be spoken (the others go on)."""
    if len(speakers) != len(requests):
        raise ValueError(f"{len(requests)} requests but {len(speakers)} voices")
    if any(request.stream for request in requests):
        raise ValueError("a streamed request is spoken alone (CosyVoice.run), never in a batch")
    lines: list[_Line] = []
    for index, (request, speaker) in enumerate(zip(requests, speakers)):
        started = time.perf_counter()
        try:
            plan = prompts.plan_request(model.version, model.normalizer, request)
            speaker = model._speaker_for(request, speaker)
        except SynthesisError as error:
            yield index, error
            continue
        sampler = model.networks.llm.make_sampler(seed=request.seed)
        lines.append(_Line(index, plan, speaker, request.seed, sampler, time.perf_counter() - started))
    for start in range(0, len(lines), batch_size):
        group = lines[start : start + batch_size]
        rounds = max(len(line.plan.segments) for line in group)
        for segment_index in range(rounds):
            if should_stop():
                return
            live = [line for line in group if not line.failed and segment_index < len(line.plan.segments)]
            yield from _round(model, live, segment_index)


def _round(model: CosyVoice, live: list[_Line], segment_index: int) -> Iterator[tuple[int, SynthesisResult]]:
    """Sentence ``segment_index`` of every line in ``live``: one LLM batch, one flow batch, the vocoder per line."""
    llm = model.networks.llm
    started = time.perf_counter()
    batch_lines, decoding = [], []
    for line in live:
        segment = line.plan.segments[segment_index]
        prompt_speech = (
            line.speaker.speech_tokens if line.plan.mode == "zero_shot" else line.speaker.speech_tokens[:, :0]
        )
        try:
            batch_lines.append(
                llm.batch_line(
                    _ids(model.tokenizer.encode(segment.llm_text)),
                    _ids(model.tokenizer.encode(line.plan.llm_prompt_text)),
                    prompt_speech,
                    line.sampler,
                )
            )
        except SpeechLMInputError as error:
            line.failed = True
            yield line.index, SynthesisError(str(error), field="text")
            continue
        decoding.append(line)
    if not decoding:
        return
    token_lists = [list(filter_silent_runs(tokens, llm.silent_ids)) for tokens in decode_batch(llm, batch_lines)]
    llm_s = time.perf_counter() - started
    speaking = []
    for line, tokens in zip(decoding, token_lists):
        if tokens:
            speaking.append((line, tokens))
            continue
        line.failed = True
        text = line.plan.segments[segment_index].display_text
        yield (
            line.index,
            SynthesisError(f"the model produced no speech for {text!r}; try rephrasing or another seed", field="text"),
        )
    if not speaking:
        return
    started = time.perf_counter()
    mels = _flow_batch(model, speaking)
    flow_s = time.perf_counter() - started
    noises = [model._noise(line.seed, segment_index) for line, _ in speaking]  # CosyVoice2's: seeded per sentence
    notes: list[list[str]] = [[] for _ in speaking]
    started = time.perf_counter()
    waves = _vocode_batch(model, mels, [line.plan.speed for line, _ in speaking], noises, notes)
    vocoder_s = time.perf_counter() - started
    for index, ((line, tokens), wave) in enumerate(zip(speaking, waves)):
        segment = line.plan.segments[segment_index]
        timings = {"frontend": line.frontend_s if segment_index == 0 else 0.0, "llm": llm_s, "flow": flow_s}
        started = time.perf_counter()
        if wave is None:  # a non-finite mel: the solo path redoes it in float32
            noise = noises[index]
            wave = model._tokens_to_wave(tokens, line.speaker, line.plan.speed, timings, noise, notes[index])
        else:
            timings["vocoder"] = vocoder_s
        yield (
            line.index,
            SynthesisResult(
                audio=wave,
                sample_rate=model.sample_rate,
                speech_token_count=len(tokens),
                seconds=llm_s + flow_s + vocoder_s + time.perf_counter() - started + timings["frontend"],
                text=segment.display_text,
                segment_index=segment_index,
                segment_count=len(line.plan.segments),
                timings=timings,
                seed=line.seed,
                mode=line.plan.mode,
                notes=notes[index],
                batch_size=len(live),
            ),
        )
    model._between_sentences()


def _flow_batch(model: CosyVoice, speaking: list[tuple[_Line, list[int]]]) -> list[torch.Tensor | None]:
    """Each line's mel from one batched flow call; None where it is not finite (redone alone)."""
    flow = model.networks.flow
    device = next(flow.parameters()).device
    inputs = [
        (
            torch.tensor([tokens], dtype=torch.long, device=device),
            line.speaker.speech_tokens.to(device),
            line.speaker.mel.to(device),
            line.speaker.embedding.to(device),
        )
        for line, tokens in speaking
    ]
    return [mel if bool(torch.isfinite(mel).all()) else None for mel in flow.inference_batch(inputs)]


@torch.inference_mode()
def _vocode_batch(model: CosyVoice, mels, speeds, noises, notes: list[list[str]]) -> list[np.ndarray | None]:
    """Each line's waveform (None where its mel is None); the torch vocoder makes them in one batch
    (``models/vocoder/batch.py``), a swapped-in one (Core ML) line by line, falling back as alone."""
    scaled = [
        None if mel is None else mel if speed == 1.0 else F.interpolate(mel, size=_stretched(mel, speed), mode="linear")
        for mel, speed in zip(mels, speeds)
    ]
    ready = [index for index, mel in enumerate(scaled) if mel is not None]
    waves: list[np.ndarray | None] = [None] * len(mels)
    if model.vocoder is model.networks.hift:
        made = vocode_batch(model.networks.hift, [scaled[i].float() for i in ready], [noises[i] for i in ready])
    else:
        made = [model._vocode(scaled[i].float(), noises[i], notes[i]) for i in ready]
    for index, wave in zip(ready, made):
        waves[index] = wave[0].float().cpu().numpy()
    return waves


def _stretched(mel: torch.Tensor, speed: float) -> int:
    return max(1, int(mel.shape[2] / speed))  # as CosyVoice._tokens_to_wave stretches a mel


def batches_on(llm) -> bool:
    """Whether this model's LLM decodes batches (the torch speech LM; the MLX one speaks line by line for now)."""
    return isinstance(llm, SpeechLM)


def _ids(ids: list[int]) -> torch.Tensor:
    return torch.tensor([ids], dtype=torch.long)
