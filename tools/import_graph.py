"""Count the package's rooms, import floors, upward imports and circles, read with `ast`.

A room is a top-level module or sub-package of `cosyvoice_mac` (`engine`, `request`, ...). An edge
A -> B means some module of A imports some module of B, at module level, inside a function body or
under `if TYPE_CHECKING:`. A room's floor is one more than the highest floor it imports (rooms in a
circle share one floor). An upward import is an edge to a room of a higher layer in LAYERS, the order
the house is built in (tests/test_layers.py keeps it); a circle is a set of modules that import each
other (real: at run time; type-only: through `if TYPE_CHECKING:` imports as well).

    python tools/import_graph.py            # the summary as JSON
    python tools/import_graph.py --edges    # and every room-to-room edge
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "cosyvoice_mac"

# The house, bottom to top: a room may import its own layer and the layers below, never above.
LAYERS = (
    # facts every layer may know, the C heap's trim, the typed reader, Gradio's import without its stub rewrite
    ("errors", "paths", "wire", "heap", "stored", "gradio_stubs"),
    # torch-free rules (device: torch's door)
    (
        *("config", "checkpoint", "device", "versions", "settings", "request", "conversion_request", "token_sampling"),
        *("sound", "style_names", "voice_file", "provenance"),
    ),
    ("models", "mlx"),  # the networks
    ("frontend",),  # text and prompt audio -> ids and features
    ("pipeline", "preview", "coreml"),  # Request -> audio, on either engine
    ("engine",),  # the worker process, its queue, the model host
    # sequences of requests (here, or on a Ray cluster's workers), the library door, tools
    ("longform", "cluster", "load", "download", "download_modelscope", "bench"),
    ("webui", "api", "cli"),  # the front ends
    ("app", "__main__", "__init__"),  # the composition root (and the package's lazy front door)
)
FRONT_ENDS = ("webui", "api", "cli")
COMPOSITION_ROOT = ("app", "__main__")
# Wave 2's rooms, only to count the tree before the redesign with the same rule.
WAVE2_ROOMS = {
    "cli_app": "cli",
    "cli_engine": "cli",
    "bench_cli": "bench",
    "bench_decode": "bench",
    "bench_floors": "bench",
    "bench_memory": "bench",
    "opcount": "bench",
    "audio": "frontend",
    "prompt_limits": "sound",
}


def layer_of(room: str) -> int:
    room = WAVE2_ROOMS.get(room, room)
    for index, rooms in enumerate(LAYERS):
        if room in rooms:
            return index
    raise KeyError(f"room {room!r} is in no layer of LAYERS (tools/import_graph.py): give it one")


@dataclass(frozen=True)
class Import:
    """One import statement: which module has it, which module it names, and whether it is hint-only."""

    source: str  # dotted module name, e.g. cosyvoice_mac.engine.worker
    target: str  # dotted module name it imports (resolved for relative imports)
    type_only: bool  # under `if TYPE_CHECKING:`
    line: int


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, root: Path, known: set[str]) -> list[Import]:
    """Every import of `path` that names a module of the package, module-level or not."""
    name = module_name(path, root)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []

    def resolve(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join(base + ([node.module] if node.module else []))

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    found.append(Import(name, alias.name, type_only, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            target = resolve(node)
            if target.split(".")[0] == PACKAGE:
                for alias in node.names:  # `from pkg import module` names a module
                    full = f"{target}.{alias.name}"
                    found.append(Import(name, full if full in known else target, type_only, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(tree, False)
    return found


def all_imports(root: Path) -> list[Import]:
    files = sorted((root / PACKAGE).rglob("*.py"))
    known = {module_name(path, root) for path in files}
    return [imp for path in files for imp in imports_of(path, root, known)]


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components, iteratively (circles are the components of more than one node)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def module_circles(imports: list[Import], include_type_only: bool) -> list[set[str]]:
    """Circles among modules (not rooms): the real ones, or with hint-only imports counted too."""
    edges: dict[str, set[str]] = {}
    nodes: set[str] = set()
    for imp in imports:
        if imp.type_only and not include_type_only:
            continue
        if imp.source == imp.target or imp.source.startswith(imp.target + "."):
            continue  # a module importing its own package's __init__ is not a circle we count
        edges.setdefault(imp.source, set()).add(imp.target)
        nodes.update((imp.source, imp.target))
    return [c for c in strongly_connected(nodes, edges) if len(c) > 1]


def summary(root: Path) -> dict:
    imports = all_imports(root)
    rooms = {room_of(module_name(p, root)) for p in (root / PACKAGE).rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for imp in imports:
        a, b = room_of(imp.source), room_of(imp.target)
        if a != b and b != "__init__":
            edges.setdefault(a, set()).add(b)
    components = strongly_connected(rooms, edges)
    component_of = {room: i for i, c in enumerate(components) for room in c}
    floor: dict[int, int] = {}
    for i, component in enumerate(components):  # Tarjan yields components in reverse topological order
        below = [floor[component_of[b]] for a in component for b in edges.get(a, ()) if component_of[b] != i]
        floor[i] = 1 + max(below, default=0)
    room_floor = {room: floor[component_of[room]] for room in rooms}
    upward = sorted((a, b) for a, targets in edges.items() for b in targets if layer_of(b) > layer_of(a))
    real = module_circles(imports, include_type_only=False)
    every = module_circles(imports, include_type_only=True)
    into_front_ends = sorted(
        (a, b)
        for a, targets in edges.items()
        for b in targets
        if WAVE2_ROOMS.get(b, b) in FRONT_ENDS
        and a not in COMPOSITION_ROOT
        and WAVE2_ROOMS.get(a, a) != WAVE2_ROOMS.get(b, b)
    )
    return {
        "rooms": len(rooms),
        "front_end_imports": len(into_front_ends),
        "into_front_ends": [f"{a} -> {b}" for a, b in into_front_ends],
        "floors": max(room_floor.values()),
        "room_edges": sum(len(t) for t in edges.values()),
        "upward_imports": len(upward),
        "upward": [f"{a} -> {b}" for a, b in upward],
        "room_circles": [sorted(c) for c in components if len(c) > 1],
        "module_circles_real": [sorted(c) for c in real],
        "module_circles_type_only": [sorted(c) for c in every if not any(c <= r for r in real)],
        "floor_of": dict(sorted(room_floor.items(), key=lambda kv: (kv[1], kv[0]))),
        "_edges": {a: sorted(t) for a, t in sorted(edges.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--edges", action="store_true", help="print every room-to-room edge too")
    args = parser.parse_args(argv)
    result = summary(args.root)
    if not args.edges:
        result.pop("_edges")
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
