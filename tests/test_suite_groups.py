"""How ``bash run.sh test`` spreads the suite over xdist workers (``--dist loadgroup``): each test's group."""

from __future__ import annotations

from pathlib import Path

from tests import conftest

TESTS = Path(conftest.__file__).parent


class _Item:
    def __init__(self, relative: str):
        self.path = TESTS / relative
        self.markers = []

    def add_marker(self, marker) -> None:
        self.markers.append(marker)


def _groups(*relative: str) -> list[str]:
    items = [_Item(name) for name in relative]
    conftest.pytest_collection_modifyitems(None, items)
    return [item.markers[0].args[0] for item in items]


def test_a_folder_sharing_one_app_server_goes_whole_and_other_modules_stay_together():
    api = _groups("api/test_openai_speech.py", "api/test_gradio_api.py")
    assert api == ["api", "api"]
    assert _groups("test_request.py", "test_request.py", "test_streaming.py") == [
        "test_request.py",
        "test_request.py",
        "test_streaming.py",
    ]


def test_the_core_ml_modules_share_one_worker_and_so_the_sessions_conversions():
    convert, runtime, mac = _groups("test_coreml_convert.py", "test_coreml_runtime.py", "test_coreml_mac.py")
    assert convert == runtime == mac
    assert convert not in _groups("test_coreml_rewrite.py", "test_mlx_convert.py")


def test_the_ray_cluster_modules_share_one_worker_so_one_cluster_runs_at_a_time():
    assert _groups("test_cluster.py", "test_cluster_app.py") == ["ray-cluster", "ray-cluster"]
