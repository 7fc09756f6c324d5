"""The front door: ``load_model()`` picks and loads a voice model the way the app does.

``load_model("models/Fun-CosyVoice3-0.5B")`` loads that folder; a bare name is looked up under models/;
"preview" is the offline preview voice; no argument picks a CosyVoice3 folder, else any model folder,
else the preview voice (``webui.state.pick_model``: one rule for the page, the CLI and Python).
"""

from __future__ import annotations

import os
from pathlib import Path

from cosyvoice_mac.errors import CosyVoiceError

# The app's models/ folder; COSYVOICE_MODELS_DIR points elsewhere (as the page's --models-dir does).
MODELS_DIR = Path(os.environ.get("COSYVOICE_MODELS_DIR") or Path(__file__).resolve().parents[1] / "models")
PREVIEW = "preview"


class NoModelError(CosyVoiceError):
    """No model folder is installed and the preview voice is not either."""


def resolve_model(name: str | Path | None = None, models_dir: str | Path = MODELS_DIR) -> Path | None:
    """The folder to load for ``name`` (a path, or a folder name under ``models_dir``); None for the preview
    voice. NoModelError when nothing can be picked."""
    from cosyvoice_mac.webui.features import preview_available
    from cosyvoice_mac.webui.state import pick_model

    if name is None:
        choice = pick_model(Path(models_dir), preview=preview_available())
        if choice is None:
            raise NoModelError(
                f"no model folder in {models_dir} and no preview voice; download one with "
                "`bash run.sh download cosyvoice3`"
            )
        return choice.path
    if str(name) == PREVIEW:
        return None
    path = Path(name).expanduser()
    if not path.exists() and (Path(models_dir) / str(name)).exists():
        path = Path(models_dir) / str(name)
    return path


def load_model(
    name: str | Path | None = None,
    device: str = "auto",
    dtype: str | None = None,
    *,
    models_dir: str | Path = MODELS_DIR,
    **options,
):
    """A loaded backend (``CosyVoice``, or ``PreviewVoice`` for the preview voice) ready to ``synthesize``."""
    folder = resolve_model(name, models_dir)
    if folder is None:
        from cosyvoice_mac.preview.backend import PreviewVoice

        return PreviewVoice.from_pretrained(None, device=device, dtype=dtype)
    from cosyvoice_mac.pipeline.cosyvoice import CosyVoice

    return CosyVoice.from_pretrained(folder, device=device, dtype=dtype, **options)
