"""An official model folder on disk: which version it is and where each needed file lies.

The folder is used exactly as downloaded (``FunAudioLLM/Fun-CosyVoice3-0.5B-2512`` or
``FunAudioLLM/CosyVoice2-0.5B``); nothing in it is rewritten or executed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cosyvoice_mac.config import ConfigError, read_yaml_config, tag_name
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.settings import setting
from cosyvoice_mac.stored import Field, read_json, typed
from cosyvoice_mac.versions import SPECS, VERSIONS  # noqa: F401 (VERSIONS re-exported)

HUB_REPOS = {name: spec.hub_repo for name, spec in SPECS.items()}
SPEECH_TOKENIZER_FILES = {name: spec.speech_tokenizer_file for name, spec in SPECS.items()}

BLANK_EN = "CosyVoice-BlankEN"
RL_LLM_FILE = "llm.rl.pt"  # CosyVoice3's reinforcement-tuned LLM, same keys as llm.pt (upstream: lower CER/WER)
LLM_CHOICE_FILE = "cosyvoice-mac.json"  # written by `download --rl`: {"llm": "llm.rl.pt"}; ours, not upstream's
LLM_ENV = setting("llm_file").env  # "rl" or "base": overrides the folder's choice


def inference_files(version: str) -> list[str]:
    """The files plain PyTorch inference reads (spec section 1); downloads fetch only these."""
    return [
        f"{version}.yaml",
        "llm.pt",
        "flow.pt",
        "hift.pt",
        "campplus.onnx",
        SPEECH_TOKENIZER_FILES[version],
        f"{BLANK_EN}/config.json",
        f"{BLANK_EN}/tokenizer_config.json",
        f"{BLANK_EN}/vocab.json",
        f"{BLANK_EN}/merges.txt",
    ]


class ModelFolderError(CosyVoiceError, FileNotFoundError):
    """The folder is not a CosyVoice model folder, or lacks a file inference needs."""


def detect_version(path: Path) -> str:
    """``cosyvoice3`` or ``cosyvoice2`` from the YAML file the folder holds (exactly one)."""
    path = Path(path)
    if not path.is_dir():
        raise ModelFolderError(f"model folder {path} does not exist")
    found = [version for version in VERSIONS if (path / f"{version}.yaml").is_file()]
    if (path / "cosyvoice.yaml").is_file() and not found and (path / SPEECH_TOKENIZER_FILES["cosyvoice2"]).is_file():
        # CosyVoice2-0.5B's hub repo named its yaml cosyvoice.yaml before it became cosyvoice2.yaml.
        raise ModelFolderError(
            f"{path} is an old snapshot of CosyVoice2-0.5B (cosyvoice.yaml beside speech_tokenizer_v2.onnx), "
            "whose yaml this app does not read; re-download with `bash run.sh download cosyvoice2`"
        )
    if (path / "cosyvoice.yaml").is_file() and not found:
        raise ModelFolderError(
            f"{path} holds a CosyVoice-300M (v1) model, which this app does not run; "
            "use Fun-CosyVoice3-0.5B or CosyVoice2-0.5B"
        )
    if not found:
        raise ModelFolderError(
            f"{path} is not a CosyVoice model folder (no cosyvoice3.yaml or cosyvoice2.yaml). "
            "Run: bash run.sh download cosyvoice3"
        )
    if len(found) > 1:
        raise ModelFolderError(f"{path} holds both cosyvoice2.yaml and cosyvoice3.yaml; keep one")
    return found[0]


def model_yaml(path: str | Path) -> Path:
    """The folder's YAML: ``<version>.yaml`` of :func:`detect_version` (ModelFolderError as it says)."""
    path = Path(path)
    return path / f"{detect_version(path)}.yaml"


@dataclass
class ModelFolder:
    """A model folder: its path, version and parsed YAML (plain data)."""

    path: Path
    version: str
    config: dict

    @classmethod
    def open(cls, path: str | Path) -> "ModelFolder":
        path = Path(path).expanduser().resolve()
        version = detect_version(path)
        try:
            config = read_yaml_config(path / f"{version}.yaml", overrides={"qwen_pretrain_path": str(path / BLANK_EN)})
        except ConfigError as error:
            raise ModelFolderError(str(error)) from error
        spec = SPECS[version]
        for section, expected in (("llm", spec.llm_class), ("flow", spec.flow_class), ("hift", spec.hift_class)):
            node = config.get(section)
            found = tag_name(node) if isinstance(node, dict) else ""
            if found and found != expected:  # the networks take their row from these classes: they must agree
                raise ModelFolderError(
                    f"{path / f'{version}.yaml'}: its {section} section is a {found}, but a {version} model has a "
                    f"{expected}; the folder mixes files of two model versions (download it again)"
                )
        return cls(path=path, version=version, config=config)

    @property
    def hub_repo(self) -> str:
        return HUB_REPOS[self.version]

    @property
    def name(self) -> str:
        return self.path.name

    def file(self, relative: str) -> Path:
        """Path of a needed file; a clear error naming it and the hub repo when it is missing."""
        candidate = self.path / relative
        if not candidate.exists():
            raise ModelFolderError(
                f"{candidate} is missing from the model folder. Download it from the Hugging Face "
                f"repo {self.hub_repo} (bash run.sh download {self.version})"
            )
        return candidate

    @property
    def llm_file(self) -> str:
        """``llm.pt``, or ``llm.rl.pt`` where the user asked for it: ``download --rl`` or ``COSYVOICE_LLM=rl``.

        Never chosen because the file merely exists: a full hub snapshot holds it too.
        """
        asked = os.environ.get(LLM_ENV, "").strip().lower()
        if asked not in ("", "rl", "base"):
            raise ModelFolderError(f"{LLM_ENV}={asked!r} is not understood; use rl or base")
        if not asked and self.has(LLM_CHOICE_FILE):
            chosen = self.path / LLM_CHOICE_FILE
            try:
                choice, _ = typed(read_json(chosen), {"llm": Field(("text", "null"))}, str(chosen))
            except (OSError, ValueError) as error:
                raise ModelFolderError(f"{chosen} is unreadable ({error}); delete it") from error
            if choice is None:
                raise ModelFolderError(f"{chosen} is not the LLM choice `download --rl` writes; delete it")
            asked = "rl" if choice["llm"] == RL_LLM_FILE else ""
        if asked == "rl":
            if not SPECS[self.version].rl_llm:
                raise ModelFolderError(f"{RL_LLM_FILE} exists for Fun-CosyVoice3 only, not {self.version}")
            if not self.has(RL_LLM_FILE):
                raise ModelFolderError(
                    f"{RL_LLM_FILE} was asked for but is not in {self.path}: bash run.sh download cosyvoice3 --rl"
                )
            return RL_LLM_FILE
        return "llm.pt"

    def has(self, relative: str) -> bool:
        return (self.path / relative).exists()
