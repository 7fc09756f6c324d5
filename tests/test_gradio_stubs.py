"""Gradio's per-import type-stub rewrite is skipped in every process that imports the package first
(cosyvoice_mac/gradio_stubs.py), and Gradio's components still work."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A component of our own in a file: Gradio's metaclass writes a .pyi beside its source unless the rewrite is skipped.
COMPONENT = textwrap.dedent(
    """
    from gradio.components.base import Component


    class Thing(Component):
        EVENTS = ["change"]

        def preprocess(self, payload):
            return payload

        def postprocess(self, value):
            return value

        def example_payload(self):
            return "x"

        def example_value(self):
            return "x"

        def api_info(self):
            return {"type": "string"}
    """
)

CHECK = textwrap.dedent(
    """
    import importlib.util, sys
    {first}
    import gradio as gr
    spec = importlib.util.spec_from_file_location("thing", sys.argv[1])
    module = sys.modules["thing"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with gr.Blocks() as page:
        box = gr.Textbox(value="hello")
        module.Thing()
    print(box.value, len(page.blocks))
    """
)


def _define_component(tmp_path, first_import: str) -> tuple[str, bool]:
    source = tmp_path / "thing.py"
    source.write_text(COMPONENT)
    done = subprocess.run(
        [sys.executable, "-c", CHECK.format(first=first_import), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), source.with_suffix(".pyi").exists()


def test_importing_the_package_first_leaves_gradios_stubs_alone_and_components_work(tmp_path):
    printed, stub_written = _define_component(tmp_path, "import cosyvoice_mac")
    assert printed.startswith("hello ")  # a page with Gradio's own component and ours is built as ever
    assert not stub_written


def test_without_the_package_gradio_writes_the_stub_so_the_test_above_can_fail(tmp_path):
    """The control: the same component defined with Gradio alone gets its .pyi, which the skip prevents."""
    printed, stub_written = _define_component(tmp_path, "")
    assert printed.startswith("hello ")
    assert stub_written
