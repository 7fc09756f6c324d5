"""The front door: ``load_model()`` picks and loads a voice model the way the app does.

``load_model("models/Fun-CosyVoice3-0.5B")`` loads that folder; a bare name is looked up under models/;
"preview" is the offline preview voice; no argument picks a CosyVoice3 folder, else any model folder,
else the preview voice (``engine.host.pick_model``: one rule for the page, the CLI and Python). A bare name
and the default are looked for in ``paths.default_models_dir()`` ($COSYVOICE_MODELS_DIR, else models/).
"""

from __future__ import annotations

from pathlib import Path

from cosyvoice_mac import settings
from cosyvoice_mac.engine.host import pick_model
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.paths import default_models_dir
from cosyvoice_mac.preview import PREVIEW, preview_available


class NoModelError(CosyVoiceError):
    """No model folder is installed and the preview voice is not either."""


def resolve_model(name: str | Path | None = None, models_dir: str | Path | None = None) -> Path | None:
    """The folder to load for ``name`` (a path, or a folder name under ``models_dir``, by default
    ``default_models_dir()``); None for the preview voice. NoModelError when nothing can be picked."""
    models_dir = Path(models_dir) if models_dir is not None else default_models_dir()
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
    device: str | None = None,
    dtype: str | None = None,
    *,
    models_dir: str | Path | None = None,
    **options,
):
    """A loaded backend (``CosyVoice``, or ``PreviewVoice`` for the preview voice) ready to ``synthesize``.

    ``device`` follows the settings table's one order, as the CLI's ``--device`` does: the argument, else
    ``$COSYVOICE_DEVICE``, else auto."""
    from cosyvoice_mac.engine.takes import TakeChecker

    device = settings.resolve("device", device)
    folder = resolve_model(name, models_dir)
    if folder is None:
        from cosyvoice_mac.preview.backend import PreviewVoice

        model = PreviewVoice.from_pretrained(None, device=device, dtype=dtype)
    else:
        from cosyvoice_mac.pipeline.cosyvoice import CosyVoice

        model = CosyVoice.from_pretrained(folder, device=device, dtype=dtype, **options)
    model.take_checker = TakeChecker()  # each sentence checked, retaken and timed, as the app's are
    return model
