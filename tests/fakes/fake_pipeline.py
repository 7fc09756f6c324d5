"""A stand-in for ``cosyvoice_mac.pipeline.CosyVoice`` with the same public contract, for engine tests.

It loads nothing and makes tones instead of speech, and it can misbehave on request. Markers in
the text steer one job; keyword arguments of ``from_pretrained`` (the engine's
``pipeline_kwargs``) steer the whole worker:

* ``[slow]``          each sentence takes ``segment_s`` seconds (cancellable between sentences)
* ``[hang]``          never returns and ignores ``should_stop`` (a stuck model)
* ``[device-error]``  raises an MPS "not implemented" RuntimeError while on a non-CPU device
* ``[bad]``           raises SynthesisError (bad input)

``home_device`` is the device it claims to load on (``"mps"`` lets the CPU-retry path run on
Linux); ``extract_s`` makes feature extraction slow; ``load_s`` slows loading; ``fail_load``
raises while loading; ``silent`` makes every synthesis silent (a broken model); ``engine`` is chosen by
the real rule (``choose_engine``) and reported, though the fake makes its tones the same way on either.

``DeviceErrorOnce`` wraps the REAL pipeline instead: it claims ``home_device`` and raises one
device error on the first job whose text has ``[device-error]``, so the real CPU retry runs.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.mlx.choice import choose_engine
from cosyvoice_mac.pipeline.backend import BackendBase
from cosyvoice_mac.pipeline.types import SAMPLE_RATE, SpeakerPrompt, SynthesisError, SynthesisResult

MPS_ERROR = (
    "The operator 'aten::_fake_op' is not currently implemented for the MPS device. "
    "As a temporary fix, you can set PYTORCH_ENABLE_MPS_FALLBACK=1"
)


def _sentences(text: str) -> list[str]:
    parts = [part.strip() for part in re.split(r"(?<=[.!?])\s+", text) if part.strip()]
    return parts or [text]


class FakeCosyVoice(BackendBase):
    """Owns nothing but its settings; every method honours the real pipeline's signature."""

    version = "cosyvoice3"
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        model_dir,
        device: torch.device,
        dtype,
        *,
        extract_s=0.0,
        segment_s=0.2,
        silent=False,
        segment_samples=2400,
        batch=1,
    ):
        self.model_dir = str(model_dir)
        self.model_id = f"fake-{Path(model_dir).name}"
        self.device = device
        self.dtype = dtype or torch.float32
        self.extract_s, self.segment_s, self.silent = extract_s, segment_s, silent
        self.segment_samples = segment_samples
        self.batch = batch  # requests run_batch speaks together (the real one: the batch_lines setting)
        self.batches: list[list[str]] = []  # the texts of each run_batch call, in the order given
        self.moves: list[str] = []

    @classmethod
    def from_pretrained(
        cls,
        model_dir,
        device="auto",
        dtype=None,
        random_weights=False,
        *,
        home_device="cpu",
        load_s=0.0,
        fail_load=False,
        engine=None,
        mlx_llm=None,  # the MLX LLM's precision: the fake makes tones either way
        **settings,
    ) -> "FakeCosyVoice":
        if fail_load:
            raise FileNotFoundError(f"{model_dir}/llm.pt is missing (fake load failure)")
        time.sleep(load_s)
        chosen = home_device if device in ("auto", None) else device
        fake = cls(model_dir, torch.device(chosen), dtype, **settings)
        fake.engine = choose_engine(engine, fake.version, device)  # the real rule picks; tones come out either way
        return fake

    def to(self, device) -> "FakeCosyVoice":
        self.device = torch.device(device)
        self.moves.append(str(self.device))
        return self

    def use_vocoder(self, vocoder=None) -> None:
        pass

    def prepare_streaming(self, speaker) -> bool:
        return False

    def prepare_prompt(self, audio, sample_rate=None, transcript=None) -> SpeakerPrompt:
        from cosyvoice_mac.frontend.prompt_audio import decode_prompt

        time.sleep(self.extract_s)
        digest = decode_prompt(audio, sample_rate).content_hash
        seed = int(digest[:8], 16)
        generator = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, 6561, (1, 50), generator=generator)
        return SpeakerPrompt(
            speech_tokens=tokens,
            mel=torch.randn(1, 100, 80, generator=generator),
            embedding=torch.randn(1, 192, generator=generator),
            audio_hash=digest,
            model_id=self.model_id,
            transcript=transcript,
            duration_s=2.0,
        )

    def run(self, request, speaker=None, should_stop=None, style_speakers=None):
        text = request.text
        if "[bad]" in text:
            raise SynthesisError("the text contains unknown markup [bad]; remove it")
        speaker = self._speaker_for(request, speaker)
        if "[device-error]" in text and self.device.type != "cpu":
            raise RuntimeError(MPS_ERROR)
        return self._pieces(text, request.seed, request.speed, request.mode, speaker, should_stop or (lambda: False))

    def batch_lines(self) -> int:
        return self.batch

    def run_batch(self, requests, speakers=None, should_stop=None, batch_size=None):
        """As the real one: a bad request fails alone, the others' sentences come round by round."""
        should_stop = should_stop or (lambda: False)
        speakers = list(speakers) if speakers is not None else [None] * len(requests)
        self.batches.append([request.text for request in requests])
        streams = {}
        for index, (request, speaker) in enumerate(zip(requests, speakers)):
            try:
                streams[index] = iter(self.run(request, speaker, should_stop))
            except SynthesisError as error:
                yield index, error
        while streams:
            for index in list(streams):
                if should_stop():
                    return
                piece = next(streams[index], None)
                if piece is None:
                    del streams[index]
                    continue
                yield index, replace(piece, batch_size=len(requests))

    def _pieces(self, text, seed, speed, mode, speaker, should_stop):
        sentences = _sentences(text)
        rng = np.random.default_rng(seed)
        mode_tag = 0 if speaker is None else int(speaker.audio_hash[:2], 16)
        while "[hang]" in text:  # stuck inside the model: never looks at should_stop
            time.sleep(1.0)
        for index, sentence in enumerate(sentences):
            if should_stop():
                return
            started = time.perf_counter()
            if "[slow]" in text:
                time.sleep(self.segment_s)
            length = int(self.segment_samples / speed)
            t = np.arange(length, dtype=np.float32) / SAMPLE_RATE
            audio = 0.3 * np.sin(2 * np.pi * (200 + mode_tag + 40 * index) * t)
            audio = (audio + 0.01 * rng.standard_normal(length)).astype(np.float32)
            if self.silent:
                audio = np.zeros(length, np.float32)
            yield SynthesisResult(
                audio=audio,
                sample_rate=SAMPLE_RATE,
                speech_token_count=length // 960,
                seconds=time.perf_counter() - started,
                text=sentence,
                segment_index=index,
                segment_count=len(sentences),
                timings={"llm": 0.001, "flow": 0.001},
                seed=seed,
                mode=mode,
            )


class DeviceErrorOnce:
    """The real CosyVoice, claiming ``home_device``: raises one device error, for the CPU-retry test.

    The wrapped model always computes on the CPU; ``to()`` only changes which device it claims.
    """

    def __init__(self, real, home_device: str):
        self._real = real
        self.device = torch.device(home_device)
        self.failed = False

    @classmethod
    def from_pretrained(
        cls, model_dir, device="auto", dtype=None, random_weights=False, *, home_device="mps"
    ) -> "DeviceErrorOnce":
        from cosyvoice_mac.pipeline import CosyVoice

        real = CosyVoice.from_pretrained(model_dir, device="cpu", dtype=dtype, random_weights=random_weights)
        return cls(real, home_device if device in ("auto", None) else device)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def to(self, device) -> "DeviceErrorOnce":
        self.device = torch.device(device)
        return self

    def run(self, request, *args, **kwargs):
        if "[device-error]" in request.text and self.device.type != "cpu" and not self.failed:
            self.failed = True
            raise RuntimeError(MPS_ERROR)
        return self._real.run(replace(request, text=request.text.replace("[device-error]", "")), *args, **kwargs)


# -- helpers for engine tests -----------------------------------------------------------------
FAKE_FACTORY = "tests.fakes.fake_pipeline:FakeCosyVoice.from_pretrained"
WRAPPED_REAL_FACTORY = "tests.fakes.fake_pipeline:DeviceErrorOnce.from_pretrained"


def fake_worker_config(tmp_path, **pipeline_kwargs):
    """A WorkerConfig for FakeCosyVoice with outputs and cache under ``tmp_path``."""
    from cosyvoice_mac.engine.worker import WorkerConfig

    model_dir = Path(tmp_path) / "fake-model"
    model_dir.mkdir(parents=True, exist_ok=True)
    return WorkerConfig(
        model_dir=str(model_dir),
        pipeline_factory=FAKE_FACTORY,
        pipeline_kwargs=pipeline_kwargs,
        outputs_dir=str(Path(tmp_path) / "outputs"),
        cache_dir=str(Path(tmp_path) / "cache"),
    )


def preview_worker_config(tmp_path, **changes):
    """A WorkerConfig for the real preview voice on the CPU with outputs and cache under ``tmp_path``."""
    from cosyvoice_mac.engine.worker import WorkerConfig
    from cosyvoice_mac.preview import PIPELINE_FACTORY

    return WorkerConfig(
        model_dir=None,
        device="cpu",
        pipeline_factory=PIPELINE_FACTORY,
        outputs_dir=str(Path(tmp_path) / "outputs"),
        cache_dir=str(Path(tmp_path) / "cache"),
        **changes,
    )


ENGINE_DEADLINE_S = 60.0


def quick_engine(config, **options):
    """An Engine with short stop and cancel waits, for a worker that answers fast (the fake one)."""
    from cosyvoice_mac.engine import Engine

    return Engine(
        config, **{"stop_timeout_s": 1.0, "cancel_grace_s": 1.0, "start_timeout_s": ENGINE_DEADLINE_S, **options}
    )


def started(engine, timeout: float = ENGINE_DEADLINE_S):
    """``engine``, started; AssertionError with its status if it does not come up."""
    assert engine.start(timeout=timeout), engine.status()
    return engine


def result_and_events(engine, request, timeout: float):
    """Submit ``request`` and wait for it: (its result, every event of it heard meanwhile, in order)."""
    with engine.subscribe() as heard:
        job_id = engine.submit(request)
        events = list(heard.of(job_id, timeout))
    return engine.result(job_id, timeout=0), events


def submit_and_wait(engine, request, kinds, timeout: float = 30.0):
    """Submit ``request``, then wait for its first event whose kind is in ``kinds``: (job id, that event)."""
    with engine.subscribe() as heard:
        job_id = engine.submit(request)
        return job_id, heard.wait_for(job_id, kinds, timeout)


def tone(seconds: float = 3.0, sample_rate: int = 24000, frequency: float = 150.0) -> np.ndarray:
    t = np.arange(int(seconds * sample_rate), dtype=np.float32) / sample_rate
    return (0.3 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def fake_voice(transcript: str | None = None):
    """A recording (a 3 s tone in a temporary WAV) for requests to the fake pipeline, which only hashes it."""
    import tempfile

    import soundfile

    from cosyvoice_mac.request import Voice

    path = Path(tempfile.gettempdir()) / f"cosyvoice-fake-voice-{os.getpid()}.wav"
    if not path.is_file():
        soundfile.write(path, tone(), 24000)
    return Voice.recording(path, transcript=transcript)


def fake_request(text: str, **options):
    """``Request.build(text, fake_voice(), **options)``: a valid request whose voice does not matter."""
    from cosyvoice_mac.request import Request

    return Request.build(text, options.pop("voice", None) or fake_voice(), **options)


def fake_engine_factory(segment_s: float = 0.3, stop_s: float = 5.0):
    """A ModelHost ``engine_factory``: the host's engine with FakeCosyVoice as its backend (the preview voice,
    which has no folder, included)."""
    from dataclasses import replace

    from cosyvoice_mac.engine import Engine

    def make(config, **options):
        fake = replace(
            config,
            pipeline_factory=FAKE_FACTORY,
            pipeline_kwargs={"segment_s": segment_s},
            model_dir=config.model_dir or "preview-stand-in",
        )
        return Engine(fake, stop_timeout_s=stop_s, cancel_grace_s=stop_s, **options)

    return make


def started_fake_host(root: Path, *, max_queue: int, segment_s: float = 0.3, stop_s: float = 5.0):
    """A ModelHost over one CosyVoice3 model folder (a yaml only) running FakeCosyVoice, started and ready."""
    from cosyvoice_mac.engine.host import HostConfig, ModelHost

    (root / "models" / "Fun-CosyVoice3-0.5B").mkdir(parents=True)
    (root / "models" / "Fun-CosyVoice3-0.5B" / "cosyvoice3.yaml").write_text("sample_rate: 24000\n")
    host = ModelHost(
        HostConfig(
            models_dir=root / "models",
            outputs_dir=root / "outputs",
            cache_dir=root / "cache",
            max_queue=max_queue,
            start_timeout_s=120,
            preview=False,
        ),
        engine_factory=fake_engine_factory(segment_s, stop_s),
    )
    host.start()
    assert host.engine.start(wait=True, timeout=120), host.status()
    return host
