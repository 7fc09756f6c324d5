"""The house's rules, read from the package's imports with ``ast`` (function bodies and TYPE_CHECKING included).

1. Nothing imports a front end (``webui``, ``api``, ``cli``) except the composition root and the front end itself.
2. ``models`` and ``mlx`` import only the rooms below them (and ``mlx`` the torch ``models`` it mirrors).
3. No room imports a room of a higher layer (``tools/import_graph.py LAYERS``), and every room has a layer.
4. No real import circle between modules; circles through type-hint-only imports are allowed only when
   listed here by name.
5. The CUDA-only tuning (``models/cuda/``) is reached only through the seams listed here, each importing it
   inside a function, so the CPU, MPS and MLX paths never load it (checked in a fresh interpreter too).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
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
    "models": {"models", "checkpoint", "config", "device", "versions", "settings", "paths", "errors"},
    "mlx": {"mlx", "models", "checkpoint", "config", "device", "versions", "settings", "paths", "errors"},
}
# Type-hint-only circles, each a class and the cache or loop it annotates (no import at run time).
TYPE_ONLY_CIRCLES = [
    {"cosyvoice_mac.models.llm.kv_cache", "cosyvoice_mac.models.llm.qwen2", "cosyvoice_mac.models.llm.decode_step"},
    {
        "cosyvoice_mac.models.llm.decoding",
        "cosyvoice_mac.models.llm.batch_decoding",
        "cosyvoice_mac.models.llm.speech_lm",
    },
    {"cosyvoice_mac.pipeline.batch", "cosyvoice_mac.pipeline.cosyvoice"},
]
CUDA_TUNING = "cosyvoice_mac.models.cuda"
# The only modules outside models/cuda/ that reach it, each inside a function that runs only where it is needed.
CUDA_SEAMS = {
    "cosyvoice_mac.models.llm.decoding": "graphs mode, a compiled 16-bit step's eager rounding, fp32 attention",
    "cosyvoice_mac.models.flow.flow": "Flow.cuda_graphs: the sampler's graphs",
    "cosyvoice_mac.models.flow.dit": "the position convolutions as products",
    "cosyvoice_mac.models.vocoder.hift": "the streamed calls' graphs",
}


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


def _in_cuda_tuning(module: str) -> bool:
    return module == CUDA_TUNING or module.startswith(CUDA_TUNING + ".")


def test_only_the_seams_import_the_cuda_tuning(imports):
    wrong = [
        _where(imp)
        for imp in imports
        if _in_cuda_tuning(imp.target) and not _in_cuda_tuning(imp.source) and imp.source not in CUDA_SEAMS
    ]
    assert not wrong, f"only {sorted(CUDA_SEAMS)} may reach models/cuda/:\n" + "\n".join(wrong)


def _module_level_cuda_imports(path: Path) -> list[int]:
    """Lines where ``path`` imports the CUDA tuning outside a function (type-hint-only imports excepted)."""
    lines = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            return
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
        if any(_in_cuda_tuning(name) for name in names):
            lines.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return lines


def test_the_seams_import_the_cuda_tuning_only_inside_functions():
    wrong = {}
    for module in CUDA_SEAMS:
        path = ROOT / (module.replace(".", "/") + ".py")
        if _module_level_cuda_imports(path):
            wrong[module] = _module_level_cuda_imports(path)
    assert not wrong, f"module-level imports of models/cuda/ load it on every device (lines): {wrong}"


def test_cpu_synthesis_never_loads_the_cuda_tuning(tmp_path):
    """A fresh interpreter imports the networks, the pipeline and (where installed) MLX, then synthesises on the
    CPU, whole and streamed: no module of models/cuda/ is loaded."""
    from tests.fakes.onnx_models import make_tiny_model_dir
    from tests.parity.common import parity_dir

    folder = make_tiny_model_dir("cosyvoice3", tmp_path / "cosyvoice3")
    script = textwrap.dedent(
        f"""
        import importlib.util, sys
        import cosyvoice_mac.models.llm, cosyvoice_mac.models.flow, cosyvoice_mac.models.vocoder
        import cosyvoice_mac.pipeline, cosyvoice_mac.pipeline.streaming
        if importlib.util.find_spec("mlx") is not None:
            import cosyvoice_mac.mlx.networks, cosyvoice_mac.mlx.speech_lm, cosyvoice_mac.mlx.flow
        from cosyvoice_mac.pipeline import CosyVoice
        model = CosyVoice.from_pretrained({str(folder)!r}, device="cpu")
        prompt = {str(parity_dir() / "prompt.wav")!r}
        for stream in (False, True):
            assert list(model.synthesize("Hello world.", prompt_audio=prompt, seed=1, stream=stream))
        print(sorted(name for name in sys.modules if name.startswith({CUDA_TUNING!r})))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
