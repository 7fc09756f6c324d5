"""Every parity case in a manifest of the ``shared/parity`` format, for every model version in it.

The folder comes from ``COSYVOICE_PARITY_DIR`` (default ``../shared/parity``). Component checks
live in ``tests/parity/<component>.py`` as ``CASES = {name: check(ctx)}`` (every version) and
``CASES_BY_VERSION = {version: {name: check(ctx)}}`` (cases that exist for one version only).
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tests.parity as parity_package
from tests.parity.common import ParityContext, parity_dir, versions_in_manifest

ROOT = parity_dir()
if not (ROOT / "manifest.json").is_file():
    raise RuntimeError(
        f"no parity manifest at {ROOT}: set COSYVOICE_PARITY_DIR to a folder in the shared/parity format"
    )


def _collect():
    cases = []
    for module_info in sorted(pkgutil.iter_modules(parity_package.__path__), key=lambda m: m.name):
        if module_info.name == "common":
            continue
        module = importlib.import_module(f"tests.parity.{module_info.name}")
        for version in versions_in_manifest(ROOT):
            version_cases = getattr(module, "CASES_BY_VERSION", {}).get(version, {})
            for name, check in {**getattr(module, "CASES", {}), **version_cases}.items():
                cases.append(pytest.param(version, check, id=f"{version}-{module_info.name}-{name}"))
    return cases


_CONTEXTS: dict[str, ParityContext] = {}


@pytest.mark.parametrize(("version", "check"), _collect())
def test_parity(version, check):
    context = _CONTEXTS.setdefault(version, ParityContext(ROOT, version))
    check(context)
