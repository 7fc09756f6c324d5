"""Converting the official checkpoints to MLX once: layouts, key names and the safetensors cache."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from cosyvoice_mac.checkpoint import load_checkpoint  # noqa: E402
from cosyvoice_mac.mlx import convert  # noqa: E402
from cosyvoice_mac.mlx.hift import KEY_MAP as HIFT_KEYS  # noqa: E402
from tests.parity.common import parity_dir  # noqa: E402

TINY = parity_dir() / "cosyvoice3_tiny"


def test_conv_weights_become_channels_last_and_keys_follow_the_map():
    state = {"f0_predictor.condnet.4.weight": torch.arange(24.0).reshape(2, 3, 4), "l.bias": torch.ones(2)}
    converted = convert.convert_state(state, HIFT_KEYS)
    assert set(converted) == {"f0_predictor.condnet.2.weight", "l.bias"}
    weight = np.array(converted["f0_predictor.condnet.2.weight"])
    assert weight.shape == (2, 4, 3) and np.array_equal(weight, state["f0_predictor.condnet.4.weight"].permute(0, 2, 1))


def test_the_cache_is_keyed_by_the_source_files_hash(tmp_path, monkeypatch):
    source = tmp_path / "hift.pt"
    shutil.copy(TINY / "hift.pt", source)
    first = convert.load_converted(source, HIFT_KEYS, cache_dir=tmp_path / "cache")
    cached = list((tmp_path / "cache").glob("*.safetensors"))
    assert [path.name for path in cached] == [f"{convert.file_sha256(source)}-native.safetensors"]

    def no_reading(*args, **kwargs):
        raise AssertionError("the checkpoint was read again despite the cache")

    monkeypatch.setattr(convert, "load_checkpoint", no_reading)
    again = convert.load_converted(source, HIFT_KEYS, cache_dir=tmp_path / "cache")
    assert set(again) == set(first) and all(mx.array_equal(again[k], first[k]).item() for k in first)

    monkeypatch.setattr(convert, "load_checkpoint", load_checkpoint)
    state = torch.load(source, map_location="cpu", weights_only=True)
    state["conv_post.bias"] = state["conv_post.bias"] + 1.0  # a changed checkpoint gets its own cache entry
    torch.save(state, source)
    changed = convert.load_converted(source, HIFT_KEYS, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 2
    assert not mx.array_equal(changed["conv_post.bias"], first["conv_post.bias"]).item()


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(convert.CACHE_ENV, str(tmp_path))
    assert convert.default_cache_dir() == tmp_path
    monkeypatch.setenv(convert.CACHE_ENV, "off")
    assert convert.default_cache_dir() is None


def test_a_start_hashes_a_checkpoint_only_when_its_size_or_mtime_changed(tmp_path, monkeypatch, capsys):
    import os

    source, cache = tmp_path / "hift.pt", tmp_path / "cache"
    shutil.copy(TINY / "hift.pt", source)
    hashed: list[str] = []
    real = convert.file_sha256

    def counted(path, progress=False):
        hashed.append(path.name)
        return real(path, progress)

    monkeypatch.setattr(convert, "file_sha256", counted)
    first = convert.load_converted(source, HIFT_KEYS, cache_dir=cache)
    shown = capsys.readouterr().err
    assert "converting hift.pt" in shown and "hashing hift.pt" in shown  # the first conversion's progress bars
    assert hashed == ["hift.pt"]
    again = convert.load_converted(source, HIFT_KEYS, cache_dir=cache)  # before: hashed on every start
    assert hashed == ["hift.pt"] and all(mx.array_equal(again[k], first[k]).item() for k in first)
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: hashed again, same cache file
    convert.load_converted(source, HIFT_KEYS, cache_dir=cache)
    assert hashed == ["hift.pt", "hift.pt"] and len(list(cache.glob("*.safetensors"))) == 1
    (cache / convert.SOURCES_INDEX).write_text("{not json")  # a damaged index only costs a hash
    convert.load_converted(source, HIFT_KEYS, cache_dir=cache)
    assert len(hashed) == 3
