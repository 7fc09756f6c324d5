"""The house's rules, read from the package's imports with ``ast`` (function bodies and TYPE_CHECKING included).

1. Nothing imports a front end (``webui``, ``api``, ``cli``) except the composition root and the front end itself.
2. ``models`` and ``mlx`` import only the rooms below them (and ``mlx`` the torch ``models`` it mirrors).
3. No room imports a room of a higher layer (``tools/import_graph.py LAYERS``), and every room has a layer.
4. No real import circle between modules; circles through type-hint-only imports are allowed only when
   listed here by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.import_graph import (
    COMPOSITION_ROOT,
    FRONT_ENDS,
    LAYERS,
    all_imports,
    layer_of,
    module_circles,
    room_of,
    summary,
)

ROOT = Path(__file__).resolve().parents[1]
NETWORK_ROOMS_MAY_IMPORT = {
    "models": {"models", "checkpoint", "config", "device", "versions", "paths", "errors"},
    "mlx": {"mlx", "models", "checkpoint", "config", "device", "versions", "paths", "errors"},
}
# Type-hint-only circles, each a class and the cache or loop it annotates (no import at run time).
TYPE_ONLY_CIRCLES = [
    {"cosyvoice_mac.models.llm.kv_cache", "cosyvoice_mac.models.llm.qwen2"},
    {"cosyvoice_mac.models.llm.decoding", "cosyvoice_mac.models.llm.speech_lm"},
]


@pytest.fixture(scope="module")
def imports():
    found = all_imports(ROOT)
    assert len(found) > 100, "the reader found almost no imports: it is broken, not the house clean"
    return found


def _where(imp) -> str:
    return f"{imp.source} (line {imp.line}) imports {imp.target}"


def test_nothing_below_imports_a_front_end(imports):
    wrong = [
        _where(imp)
        for imp in imports
        if room_of(imp.target) in FRONT_ENDS
        and room_of(imp.source) not in COMPOSITION_ROOT
        and room_of(imp.source) != room_of(imp.target)
    ]
    assert not wrong, "only cosyvoice_mac/app.py composes the front ends:\n" + "\n".join(wrong)


@pytest.mark.parametrize("room", sorted(NETWORK_ROOMS_MAY_IMPORT))
def test_the_networks_import_only_the_rooms_below_them(imports, room):
    allowed = NETWORK_ROOMS_MAY_IMPORT[room]
    wrong = [_where(imp) for imp in imports if room_of(imp.source) == room and room_of(imp.target) not in allowed]
    assert not wrong, f"{room}/ may import only {sorted(allowed)}:\n" + "\n".join(wrong)


def test_every_room_has_a_layer_and_imports_point_down(imports):
    rooms = {room_of(imp.source) for imp in imports} | {room_of(imp.target) for imp in imports}
    for room in rooms:
        layer_of(room)  # KeyError names a room nobody placed
    upward = sorted(
        {
            f"{room_of(imp.source)} -> {room_of(imp.target)}: {_where(imp)}"
            for imp in imports
            if room_of(imp.target) != "__init__"  # the package's own constants (__version__), loaded first anyway
            and layer_of(room_of(imp.target)) > layer_of(room_of(imp.source))
        }
    )
    assert not upward, "imports that point up the house (LAYERS in tools/import_graph.py):\n" + "\n".join(upward)


def test_no_import_circles(imports):
    real = module_circles(imports, include_type_only=False)
    assert not real, f"modules that import each other: {[sorted(circle) for circle in real]}"
    every = module_circles(imports, include_type_only=True)
    unlisted = [sorted(circle) for circle in every if circle not in TYPE_ONLY_CIRCLES]
    assert not unlisted, f"type-hint-only circles not listed in TYPE_ONLY_CIRCLES: {unlisted}"


def test_the_counter_reads_this_tree():
    counted = summary(ROOT)
    assert counted["upward_imports"] == 0 and not counted["room_circles"], counted["upward"]
    assert counted["rooms"] == len({room for layer in LAYERS for room in layer} & set(counted["floor_of"]))
