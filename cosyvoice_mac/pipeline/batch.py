"""Several non-streamed requests spoken together: what long-form jobs (line batches, dialogue, dubbing) hand a model.

The speech LM decodes the requests' sentences as one batch (``models/llm/batch_decoding``: each line keeps its
own sampler, so its tokens are the ones it gets alone with the same seed). Where batching them pays on the device
(``batched_stages``), the flow samples them as one batch with the padding masked (``Flow.inference_batch``), and
so does the vocoder (``models/vocoder/batch.py``: its convolution stack batched, each line's padding zeroed after
every convolution); elsewhere each line runs them alone, as ``CosyVoice.run`` does. Each line's audio therefore
equals its solo ``CosyVoice.run`` within the parity tolerances (tests/test_batched_parity.py).

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

from cosyvoice_mac.mlx.choice import MLX
from cosyvoice_mac.models.llm import SpeechLMInputError, decode_batch, filter_silent_runs
from cosyvoice_mac.models.llm.sampling import RasSampler
from cosyvoice_mac.models.vocoder.batch import vocode_batch
from cosyvoice_mac.pipeline import prompts
from cosyvoice_mac.pipeline.types import SpeakerPrompt, SynthesisError, SynthesisResult
from cosyvoice_mac.request import Request
from cosyvoice_mac.settings import env_value, out_of_range

if TYPE_CHECKING:
    from cosyvoice_mac.pipeline.cosyvoice import CosyVoice

CPU_BATCH, DEVICE_BATCH, LOW_MEMORY_BATCH = 4, 16, 2  # see batch_size_for

# The stages that run a batch's lines as one batch, by where the model runs: a torch device type, or "mlx" (the
# MLX engine, whatever its device); anywhere else ``EVERY_STAGE``. A CPU's LLM step is bound by reading the weights,
# which B lines read once, but its flow and vocoder are bound by arithmetic: batched they do the padding's work
# as well and lose the flow's CFG branches side by side (``models/flow/branches.py``), so there each line runs
# them alone (bench/results/issue47_batch/: per-stage costs at B=1 and B=4). A GPU runs a line's flow and vocoder
# far below its arithmetic rate (bound by launching kernels), so B lines cost about one. MLX batches its LLM
# (``mlx/batch_decoding.py``); its flow and vocoder have no batched form yet.
EVERY_STAGE = frozenset({"llm", "flow", "vocoder"})
BATCHED_STAGES = {"cpu": frozenset({"llm"}), MLX: frozenset({"llm"})}


def batched_stages(where: str) -> frozenset[str]:
    """Which of "llm", "flow" and "vocoder" run a batch's lines as one batch ``where`` (a torch device type, or
    "mlx"); the others run each line alone."""
    return BATCHED_STAGES.get(where, EVERY_STAGE)


def runs_on(model: CosyVoice) -> str:
    """Where ``model`` computes, as :func:`batched_stages` names it."""
    return MLX if model.engine.engine == MLX else model.device.type


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
    stages = batched_stages(runs_on(model))
    mels, flow_s = _flow_stage(model, speaking, batched="flow" in stages)
    noises = [model._noise(line.seed, segment_index) for line, _ in speaking]  # CosyVoice2's: seeded per sentence
    notes: list[list[str]] = [[] for _ in speaking]
    speeds = [line.plan.speed for line, _ in speaking]
    waves, vocoder_s = _vocoder_stage(model, mels, speeds, noises, notes, batched="vocoder" in stages)
    for index, ((line, tokens), wave) in enumerate(zip(speaking, waves)):
        segment = line.plan.segments[segment_index]
        timings = {"frontend": line.frontend_s if segment_index == 0 else 0.0, "llm": llm_s, "flow": flow_s[index]}
        started = time.perf_counter()
        if wave is None:  # a non-finite mel: the solo path redoes it in float32
            noise = noises[index]
            wave = model._tokens_to_wave(tokens, line.speaker, line.plan.speed, timings, noise, notes[index])
        else:
            timings["vocoder"] = vocoder_s[index]
        yield (
            line.index,
            SynthesisResult(
                audio=wave,
                sample_rate=model.sample_rate,
                speech_token_count=len(tokens),
                seconds=llm_s + flow_s[index] + vocoder_s[index] + time.perf_counter() - started + timings["frontend"],
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


def _flow_stage(model: CosyVoice, speaking, batched: bool) -> tuple[list[torch.Tensor | None], list[float]]:
    """Each line's mel (None where it is not finite: redone alone) and the seconds it took: one batched flow call
    (each line then reports the batch's time), or each line's own call."""
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
    if batched:
        started = time.perf_counter()
        mels = flow.inference_batch(inputs)
        seconds = [time.perf_counter() - started] * len(mels)
    else:
        mels, seconds = _each_timed(flow.inference, inputs)
    return [mel if bool(torch.isfinite(mel).all()) else None for mel in mels], seconds


@torch.inference_mode()
def _vocoder_stage(model: CosyVoice, mels, speeds, noises, notes, batched: bool):
    """Each line's waveform (None where its mel is None) and the seconds it took: the torch vocoder makes them in
    one batch when ``batched`` (``models/vocoder/batch.py``); otherwise, or a swapped-in vocoder (Core ML), line by
    line as alone (falling back as alone)."""
    scaled = [
        None if mel is None else mel if speed == 1.0 else F.interpolate(mel, size=_stretched(mel, speed), mode="linear")
        for mel, speed in zip(mels, speeds)
    ]
    ready = [index for index, mel in enumerate(scaled) if mel is not None]
    waves: list[np.ndarray | None] = [None] * len(mels)
    seconds = [0.0] * len(mels)
    if batched and model.vocoder is model.networks.hift:
        started = time.perf_counter()
        made = vocode_batch(model.networks.hift, [scaled[i].float() for i in ready], [noises[i] for i in ready])
        took = [time.perf_counter() - started] * len(ready)
    else:
        made, took = _each_timed(model._vocode, [(scaled[i].float(), noises[i], notes[i]) for i in ready])
    for index, wave, line_s in zip(ready, made, took):
        waves[index], seconds[index] = wave[0].float().cpu().numpy(), line_s
    return waves, seconds


def _each_timed(function, argument_lists) -> tuple[list, list[float]]:
    """``function(*arguments)`` for each entry, and the seconds each call took."""
    results, seconds = [], []
    for arguments in argument_lists:
        started = time.perf_counter()
        results.append(function(*arguments))
        seconds.append(time.perf_counter() - started)
    return results, seconds


def _stretched(mel: torch.Tensor, speed: float) -> int:
    return max(1, int(mel.shape[2] / speed))  # as CosyVoice._tokens_to_wave stretches a mel


def batches_on(llm) -> bool:
    """Whether this model's LLM decodes batches: the torch speech LM and the MLX one (both have ``start_batch``)."""
    return callable(getattr(llm, "start_batch", None))


def _ids(ids: list[int]) -> torch.Tensor:
    return torch.tensor([ids], dtype=torch.long)
