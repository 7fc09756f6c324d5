"""The page under trouble: a damaged voice list, restarts pressed at once, a hung worker, a full queue."""
from __future__ import annotations

from cosyvoice_mac.webui.callbacks import Callbacks
from cosyvoice_mac.webui.state import HostConfig, ModelHost, Settings


def _idle_callbacks(tmp_path) -> Callbacks:
    host = ModelHost(HostConfig(models_dir=tmp_path / "models", outputs_dir=tmp_path / "outputs",
                                cache_dir=tmp_path / "cache", preview=False))
    return Callbacks(host, Settings(tmp_path / "cache"))


def test_a_damaged_voice_list_is_named_on_the_page(tmp_path):
    callbacks = _idle_callbacks(tmp_path)
    callbacks.voices.save("alice", audio_hash="a" * 64, model_id="m")
    callbacks.voices.index_path.write_text("{damaged")
    assert [value for _, value in callbacks.voice_choices("en")] == ["", "alice"]  # restored, still listed
    panel = callbacks.status_panel("en")
    assert "Saved voices" in panel and "voices.json.unreadable-" in panel and "restored" in panel
    assert "已保存的声音" in callbacks.status_panel("zh")
