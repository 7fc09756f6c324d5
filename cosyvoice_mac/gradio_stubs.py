"""Gradio's import without its type-stub rewrite.

Every ``import gradio`` (6.x) runs ``gradio.component_meta.create_or_modify_pyi`` once per component class, about 80
times: it reads the class's source file, parses it with ``ast``, renders a Jinja template and compares (and may
rewrite) the ``.pyi`` stub beside the source. The stubs serve type checkers and editors only; nothing reads them at run
time, and the wheel ships them made. Profiled, it is about a third of the app's start (the app, the CLI's app, every
test process that imports Gradio: ~2 s of CPU each on a 2-core machine). ``install`` makes the function do nothing
as Gradio's module loads, in every process that imports this package before Gradio. Should a Gradio release rename
the function, nothing is replaced and Gradio behaves as it always did.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

MODULE = "gradio.component_meta"
FUNCTION = "create_or_modify_pyi"


def _leave_stubs_alone(*_args, **_kwargs) -> None:
    """Stands in for Gradio's stub rewrite: the stubs stay as the wheel installed them."""


def _quiet(module) -> None:
    if callable(getattr(module, FUNCTION, None)):
        setattr(module, FUNCTION, _leave_stubs_alone)


class _QuietLoader(importlib.abc.Loader):
    """Gradio's own loader, then the one replacement."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _quiet(module)


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds ``gradio.component_meta`` as Python would and hands it to :class:`_QuietLoader`."""

    def find_spec(self, fullname, path, target=None):
        if fullname != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def install() -> None:
    """Skip the stub rewrite in this process (once; at once if Gradio is already imported)."""
    if MODULE in sys.modules:
        _quiet(sys.modules[MODULE])
    elif not any(isinstance(finder, _QuietFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietFinder())
