"""The settings table (``cosyvoice_mac/settings/``) is the one declaration of every user-facing setting: the CLI's
flags, the page's sliders, the request contract's ranges and the configuration page are read from it, every
``COSYVOICE_*`` variable the package reads is in it, and one resolution order decides a value. The drifts it
fixed stay fixed: ``$COSYVOICE_DEVICE`` reaches every command, Core ML's compute units are one list, and a
batch's folder name follows one rule at the page, at ``/v1`` and in the CLI."""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cosyvoice_mac import settings
from cosyvoice_mac.app import build_serve_parser
from cosyvoice_mac.cli.main import build_parser
from cosyvoice_mac.settings import SETTINGS, flag_default, resolve, setting

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cosyvoice_mac"
TABLE = PACKAGE / "settings"
VARIABLE = re.compile(r"COSYVOICE_[A-Z_]+")
# Names of Python constants that look like a variable's name but are no environment variable.
NOT_VARIABLES = {"COSYVOICE_LICENSE_NOTE"}


def _modules(skip_table: bool = True):
    for path in sorted(PACKAGE.rglob("*.py")):
        if skip_table and TABLE in path.parents:
            continue
        yield path, ast.parse(path.read_text(encoding="utf-8"))


# -- every environment variable is in the table ------------------------------------------------------------


def test_every_cosyvoice_variable_the_package_reads_is_in_the_table():
    read = {
        node.value: f"{path.relative_to(ROOT)}:{node.lineno}"
        for path, tree in _modules(skip_table=False)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and VARIABLE.fullmatch(node.value)
    }
    assert len(read) >= 28, "the reader found too few variables: it is broken"
    missing = {name: where for name, where in read.items() if name not in settings.variables()}
    assert not missing, f"variables read by the package but not declared in the settings table: {missing}"
    assert not NOT_VARIABLES & set(settings.variables())


# The bottom-floor modules the table takes a variable's name from (the table imports them, so they cannot read it).
NAME_SOURCES = {PACKAGE / "paths.py", PACKAGE / "wire.py"}


def _docstrings(tree) -> set[int]:
    """ids of the module's, classes' and functions' docstring constants."""
    owners = [
        tree,
        *(node for node in ast.walk(tree) if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))),
    ]
    return {
        id(owner.body[0].value)
        for owner in owners
        if owner.body and isinstance(owner.body[0], ast.Expr) and isinstance(owner.body[0].value, ast.Constant)
    }


def _variable_names_in_code(tree) -> list[tuple[int, str]]:
    """(line, name) for each string in code (not a docstring) that is a variable's name: a read or a write."""
    skipped = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
        if VARIABLE.fullmatch(node.value) and node.value not in NOT_VARIABLES
    ]


def test_each_variable_is_named_in_code_only_by_the_table():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path, tree in _modules()
        if path not in NAME_SOURCES
        for line, name in _variable_names_in_code(tree)
    ]
    assert not found, "a variable's name written out beside the table (read it: settings.setting(NAME).env):\n" + (
        "\n".join(found)
    )


def test_the_variable_scanner_sees_a_read_and_skips_docstrings_and_prose():
    source = (
        '"""Reads $COSYVOICE_X."""\n'
        "def f():\n"
        '    """COSYVOICE_Y"""\n'
        '    say("set COSYVOICE_Z=1 to turn it on")\n'
        '    return os.environ.get("COSYVOICE_W")\n'
    )
    assert _variable_names_in_code(ast.parse(source)) == [(5, "COSYVOICE_W")]


def test_every_variable_a_message_or_docstring_names_is_in_the_table():
    named = {
        name: f"{path.relative_to(ROOT)}:{node.lineno}"
        for path, tree in _modules(skip_table=False)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for name in VARIABLE.findall(node.value)
        if name not in NOT_VARIABLES
    }
    unknown = {name: where for name, where in named.items() if name not in settings.variables()}
    assert not unknown, f"text names variables the settings table does not have: {unknown}"


def test_every_row_is_complete_and_every_variable_is_declared_once():
    variables = [row.env for row in SETTINGS.values() if row.env]
    assert len(variables) == len(set(variables))
    for row in SETTINGS.values():
        assert row.help and row.help_zh and row.doors, row.name
        assert re.search(r"[\u4e00-\u9fff]", row.help_zh), f"{row.name}: the Chinese help is not Chinese"
        assert row.flag or row.env or {"page", "/v1", "gradio", "python"} & set(row.doors), row.name


# -- no door restates a range or a list of choices --------------------------------------------------------


def _literal(node) -> bool:
    """A number, or a tuple or list of constants: a range or a choice list written out."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    return isinstance(node, (ast.Tuple, ast.List)) and all(isinstance(item, ast.Constant) for item in node.elts)


def _restated(tree) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        first = node.args[0] if node.args else None
        option = isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("--")
        for keyword in node.keywords:
            if keyword.arg == "choices" and option and _literal(keyword.value):
                found.append((node.lineno, f"{first.value} choices"))
            if keyword.arg in ("minimum", "maximum") and _literal(keyword.value):
                found.append((node.lineno, f"a control's {keyword.arg}"))
    return found


def test_no_flag_or_page_control_outside_the_table_restates_choices_or_a_range():
    found = [f"{path.relative_to(ROOT)}:{line}: {what}" for path, tree in _modules() for line, what in _restated(tree)]
    assert not found, "a range or a choice list written out beside the settings table:\n" + "\n".join(found)


def test_the_scanner_sees_a_restated_range_and_choice_list():
    source = 'p.add_argument("--device", choices=("cpu", "mps"))\nmake(gr.Slider, minimum=0.5, maximum=2.0)\n'
    assert [what for _, what in _restated(ast.parse(source))] == [
        "--device choices",
        "a control's minimum",
        "a control's maximum",
    ]


def _commands(parser: argparse.ArgumentParser, prefix: str = ""):
    """(command name, its parser) for every subcommand, nested ones as "coreml convert"."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{prefix}{name} ") if _has_subcommands(sub) else [(prefix + name, sub)]


def _has_subcommands(parser) -> bool:
    return any(isinstance(action, argparse._SubParsersAction) for action in parser._actions)


def _table_rows(flag: str, dest: str):
    return [row for row in SETTINGS.values() if row.flag == flag and dest in (row.name, row.flag[2:].replace("-", "_"))]


def _parsers():
    from cosyvoice_mac.cli.main import PASSED_ON  # stubs whose own parser reads the rest of the line

    yield "serve", build_serve_parser()
    yield from ((name, parser) for name, parser in _commands(build_parser()) if name not in PASSED_ON)


def test_every_flag_in_the_table_has_its_choices_default_and_door(monkeypatch):
    for row in SETTINGS.values():
        if row.env:
            monkeypatch.delenv(row.env, raising=False)
    checked = 0
    for command, parser in _parsers():
        for action in parser._actions:
            rows = [row for flag in action.option_strings for row in _table_rows(flag, action.dest)]
            if not rows:
                continue
            here = [row for row in rows if f"cli:{command}" in row.doors]
            assert here, f"{command} offers {rows[0].flag} but no row of the table says so in its doors"
            row = here[0]
            assert tuple(action.choices or ()) == row.choices, f"{command} {row.flag}"
            assert action.default == flag_default(row.name), f"{command} {row.flag}"
            checked += 1
        offered = {row.name for row in SETTINGS.values() if f"cli:{command}" in row.doors}
        flags = {flag for action in parser._actions for flag in action.option_strings}
        absent = [setting(name).flag for name in offered if setting(name).flag not in (None, *flags)]
        assert not absent, f"the table says {command} offers {absent}, but its parser has no such flag"
    assert checked > 100


def test_the_lists_outside_the_front_ends_are_the_tables():
    from cosyvoice_mac.engine.host import VOCODER_CHOICES
    from cosyvoice_mac.mlx import ENGINES
    from cosyvoice_mac.pipeline.precision_plan import PRECISIONS
    from cosyvoice_mac.request import LUFS_RANGE, MAX_SEED, MODES, SPEED_RANGE
    from cosyvoice_mac.versions import VERSIONS

    units = settings.choices("compute_units")
    assert units == ("ALL", "CPU_AND_GPU", "CPU_AND_NE", "CPU_ONLY")  # coremltools' ComputeUnit names
    assert VOCODER_CHOICES == ("torch", *(f"coreml:{unit}" for unit in units))
    assert ENGINES == settings.choices("engine") and PRECISIONS == settings.choices("precision")
    assert (SPEED_RANGE, LUFS_RANGE, MAX_SEED, MODES) == (
        settings.bounds("speed"),
        settings.bounds("loudness_lufs"),
        settings.bounds("seed")[1],
        settings.choices("mode"),
    )
    assert settings.choices("version") == settings.choices("random_weights") == VERSIONS


def test_the_networks_and_core_ml_lists_and_defaults_are_the_tables():
    from cosyvoice_mac.coreml.convert import PRECISIONS, TARGETS, ConversionOptions
    from cosyvoice_mac.coreml.split import CHUNK_FRAMES
    from cosyvoice_mac.mlx.llm_gate import MLX_LLM_GATE

    assert (PRECISIONS, TARGETS) == (settings.choices("coreml_precision"), settings.choices("coreml_target"))
    options = ConversionOptions()
    assert (options.precision, options.target, CHUNK_FRAMES) == tuple(
        setting(name).default for name in ("coreml_precision", "coreml_target", "chunk_frames")
    )
    assert tuple(row.choice for row in MLX_LLM_GATE) == settings.choices("mlx_llm")
    pytest.importorskip("mlx.core")
    from cosyvoice_mac.mlx.llm_precision import LLM_PRECISIONS

    assert tuple(LLM_PRECISIONS) == settings.choices("mlx_llm")


def test_decoding_options_default_to_the_rows_and_follow_their_variables(monkeypatch):
    from dataclasses import asdict

    from cosyvoice_mac.models.llm.decoding import DecodeOptions

    fields = {"cuda_graphs": "cuda_graphs", "compile": "compile_decode", "fuse": "fuse_decode"}
    fields |= {"device_sampling": "device_sampling", "eager_rounding": "eager_rounding"}
    for name in fields.values():
        monkeypatch.delenv(setting(name).env, raising=False)
    unset = asdict(DecodeOptions())
    assert {field: unset[field] for field in fields} == {
        "cuda_graphs": True,
        "compile": False,
        "fuse": True,
        "device_sampling": True,
        "eager_rounding": None,  # unset: the decoder's own rule (on where a 16-bit step is compiled)
    }
    for name in fields.values():
        monkeypatch.setenv(setting(name).env, "0")
    assert not any(asdict(DecodeOptions())[field] for field in fields)
    monkeypatch.setenv(setting("eager_rounding").env, "1")
    assert DecodeOptions().eager_rounding is True


def test_the_pages_sliders_read_the_table(tmp_path):
    import gradio as gr

    from cosyvoice_mac.engine.host import HostConfig, ModelHost
    from cosyvoice_mac.webui.page import build_app

    host = ModelHost(
        HostConfig(models_dir=tmp_path / "none", outputs_dir=tmp_path / "out", cache_dir=tmp_path / "c", preview=True)
    )
    try:
        page = build_app(host=host)
    finally:
        host.close()
    sliders = {block.elem_id: block for block in page.blocks.values() if isinstance(block, gr.Slider)}
    expected = {
        "cv-speed": "speed",
        "cv-vc-speed": "speed",
        "cv-lf-convert-speed": "speed",
        "cv-lf-pause": "pause",
        "cv-lf-speed-limit": "speed_limit",
        "cv-post-loudness": "loudness_lufs",
        "cv-vc-loudness": "loudness_lufs",
    }
    for elem_id, name in expected.items():
        wanted = settings.slider(name)
        found = sliders[elem_id]
        assert (found.minimum, found.maximum, found.step, found.value) == tuple(wanted.values()), elem_id
    seed = next(block for block in page.blocks.values() if getattr(block, "elem_id", None) == "cv-seed")
    assert (seed.minimum, seed.maximum) == settings.bounds("seed")


# -- the configuration page --------------------------------------------------------------------------------


def test_the_configuration_page_is_the_generated_one():
    generated = subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac.settings", "--markdown"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == generated, "regenerate: python -m cosyvoice_mac.settings --markdown > docs/configuration.md"
    for row in SETTINGS.values():
        assert f"`{row.name}`" in generated


# -- one resolution order ------------------------------------------------------------------------------------


def test_flag_then_variable_then_saved_choice_then_default(monkeypatch):
    monkeypatch.delenv("COSYVOICE_ENGINE", raising=False)
    assert resolve("engine") == "auto"
    assert resolve("engine", saved="torch") == "torch"
    assert resolve("engine", saved="no-such-engine") == "auto"  # a saved choice no longer offered is dropped
    monkeypatch.setenv("COSYVOICE_ENGINE", "mlx")
    assert resolve("engine", saved="torch") == "mlx"
    assert resolve("engine", flag="torch", saved="auto") == "torch"


def test_starting_engine_follows_the_order(tmp_path, monkeypatch):
    from cosyvoice_mac.engine.host import Settings, starting_engine

    saved = Settings(tmp_path)
    saved.update(engine="torch")
    monkeypatch.delenv("COSYVOICE_ENGINE", raising=False)
    assert starting_engine(None, saved) == "torch"
    monkeypatch.setenv("COSYVOICE_ENGINE", "mlx")
    assert starting_engine(None, saved) == "mlx"
    assert starting_engine("auto", saved) == "auto"


# -- $COSYVOICE_DEVICE reaches every command ----------------------------------------------------------------

COMMAND_LINES = {
    "synth": ["synth", "--local", "--voice", "v", "--text", "t", "--out", "o.wav"],
    "convert": ["convert", "in.wav", "--voice", "v", "--out", "o.wav"],
    "dialogue": ["dialogue", "script.txt", "--out", "o"],
    "dub": ["dub", "cues.srt", "--voice", "v", "--out", "o"],
    "batch": ["batch", "lines.txt", "--out-dir", "o"],
}


@pytest.mark.parametrize("command", [*COMMAND_LINES, "serve"])
def test_the_device_variable_is_every_commands_default_and_the_flag_wins(command, monkeypatch):
    def parsed(extra=()):
        if command == "serve":
            return build_serve_parser().parse_args(list(extra))
        return build_parser().parse_args(COMMAND_LINES[command] + list(extra))

    monkeypatch.setenv("COSYVOICE_DEVICE", "cpu")
    assert parsed().device == "cpu"
    assert parsed(["--device", "mps"]).device == "mps"
    monkeypatch.delenv("COSYVOICE_DEVICE")
    assert parsed().device == "auto"


# -- one rule for a batch's folder name, at every door -----------------------------------------------------


@pytest.mark.parametrize("typed", ["my batch", "chapter_1.v2", "我的批次", "  spaced  "])
def test_a_batch_name_with_letters_digits_and_spaces_is_kept(typed):
    assert settings.batch_name(typed) == typed.strip()


@pytest.mark.parametrize("typed", ["../up", "a/b", "a\\b", ".hidden", "-x", "a..b", "x" * 121])
def test_a_batch_name_that_could_leave_its_folder_is_refused(typed):
    from cosyvoice_mac.errors import RequestError

    with pytest.raises(RequestError) as refused:
        settings.batch_name(typed)
    assert refused.value.field == "name" and "letters, digits, spaces" in str(refused.value)


def test_no_batch_name_leaves_the_choice_to_the_door():
    assert settings.batch_name(None) is None and settings.batch_name("   ") is None


def _page_batch(tmp_path, monkeypatch, name):
    """The page's Batch tab's callback for ``name``: (the folder it would run in or None, its message)."""
    import cosyvoice_mac.webui.longform as page

    folders = []
    monkeypatch.setattr(page, "run_batch", lambda data, kind, folder, *a, **k: folders.append(folder))

    def run_here(self, lang, job, what, request, default_voice=None):
        job(SimpleNamespace(glossary=[]), lambda update: None, lambda: False)
        yield "", "", None, None

    monkeypatch.setattr(page.LongformCallbacks, "_run", run_here)
    lines = tmp_path / "lines.txt"
    lines.write_text("hello\n", encoding="utf-8")
    host = SimpleNamespace(config=SimpleNamespace(outputs_dir=tmp_path / "outputs"), current=None, engine=None)
    callbacks = page.LongformCallbacks(host, glossary=None)
    updates = list(callbacks.batch(SimpleNamespace(session_hash="s"), "en", str(lines), "", name, False, False, -16))
    return (folders[0] if folders else None), " ".join(str(update[1]) for update in updates)


def test_the_page_runs_my_batch_in_its_folder_and_refuses_a_path(tmp_path, monkeypatch):
    folder, _ = _page_batch(tmp_path, monkeypatch, "my batch")
    assert folder == tmp_path / "outputs" / "longform" / "batches" / "my batch"
    folder, message = _page_batch(tmp_path, monkeypatch, "../escape")
    assert folder is None and "letters, digits, spaces" in message


def _v1_batch(tmp_path, name: str):
    from cosyvoice_mac.api.auth import ApiAccess
    from cosyvoice_mac.api.errors import install_error_handlers
    from cosyvoice_mac.api.longform_routes import build_longform_router

    app = FastAPI()
    install_error_handlers(app, "/v1")
    app.include_router(build_longform_router(None, ApiAccess.from_settings("127.0.0.1", None), tmp_path, None))
    # A lines file that is not UTF-8: a name that passes is answered by the file's check, naming "file".
    answer = TestClient(app).post("/v1/longform/batch", data={"name": name}, files={"file": ("l.txt", b"\xff\xfe")})
    return answer.status_code, answer.json()["error"]


def test_v1_takes_my_batch_as_the_page_does_and_refuses_a_path(tmp_path, monkeypatch):
    monkeypatch.delenv("COSYVOICE_API_KEY", raising=False)
    status, error = _v1_batch(tmp_path, "my batch")
    assert status == 400 and error["param"] == "file", error  # the name passed; the file is what is wrong
    status, error = _v1_batch(tmp_path, "../escape")
    assert status == 400 and (error["param"], error["code"]) == ("name", "bad_name"), error


def test_the_cli_names_the_apps_batch_after_out_dir_by_the_same_rule():
    assert settings.batch_name_for("my batch") == "my batch"
    assert settings.batch_name_for("我的批次") == "我的批次"
    for folder in ("a:b*c", "..", "...x", "-x-", "x" * 200):
        made = settings.batch_name_for(folder)
        assert settings.batch_name(made) == made, folder  # whatever the folder, the app accepts the name
