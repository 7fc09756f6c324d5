"""versions.py is the one table of what differs between CosyVoice2 and CosyVoice3: the loaded networks and
the text front end must behave exactly as their row says (so a reader can trust that one screen), and no
other module asks which version it runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cosyvoice_mac
from cosyvoice_mac.config import ConfigError, tag_name
from cosyvoice_mac.errors import SynthesisError
from cosyvoice_mac.frontend.markup import build_llm_text, validate_markup
from cosyvoice_mac.versions import PRE_LOOKAHEAD, SAMPLE_RATE, SPECS, spec_for, spec_for_class
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.parity.common import parity_dir

PACKAGE = Path(cosyvoice_mac.__file__).parent


@pytest.fixture(scope="module", params=sorted(SPECS))
def model(request, tmp_path_factory):
    from cosyvoice_mac.pipeline import CosyVoice

    return CosyVoice.from_pretrained(
        make_tiny_model_dir(request.param, tmp_path_factory.mktemp(request.param)), device="cpu"
    )


def test_the_speech_lm_uses_the_ids_its_row_names(model):
    spec, llm = model.spec, model.networks.llm
    size = llm.config.speech_token_size
    assert spec is spec_for(model.version)
    assert llm.config.speech_vocab_size == spec.speech_vocab_size(size)
    assert (llm.sos, llm.task_id, llm.eos) == (spec.sos(size), spec.task_id(size), spec.eos(size))
    assert llm.stop_ids == spec.stop_ids(size)
    assert tuple(llm.silent_ids) == spec.silent_ids
    assert hasattr(llm, "llm_embedding") == spec.specials_in_llm_embedding
    assert (llm.llm_decoder.bias is not None) == spec.llm_decoder_bias
    assert llm.config.spec is spec  # chosen once, from the llm section's YAML class


def test_the_flow_front_end_and_the_vocoder_noise_follow_the_row(model):
    spec, flow = model.spec, model.networks.flow
    assert hasattr(flow, "pre_lookahead_layer") == (spec.flow_front == "pre_lookahead")
    assert hasattr(flow, "encoder") == (spec.flow_front == "conformer")
    assert flow.config.front == spec.flow_front
    assert (model._noise(5, 0) is not None) == spec.random_vocoder_noise
    assert model.networks.hift.config.causal == (spec.stitcher == "causal")  # the causal vocoder is what streams
    assert tag_name(model.folder.config["hift"]) == spec.hift_class
    assert model.streaming_parts().stitcher == spec.stitcher


@pytest.mark.parametrize("version", sorted(SPECS))
def test_the_mlx_flow_front_end_and_vocoder_follow_the_row(version):
    """One MLX flow class and one MLX vocoder class: the YAML's classes choose the networks, as in torch."""
    pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")
    from cosyvoice_mac.config import read_yaml_config
    from cosyvoice_mac.mlx.flow import MlxFlow
    from cosyvoice_mac.mlx.hift import MlxHiFT
    from cosyvoice_mac.models.flow import FlowConfig
    from cosyvoice_mac.models.vocoder import GaussianSourceNoise, HiFTConfig

    spec, config = SPECS[version], read_yaml_config(parity_dir() / f"{version}_tiny" / f"{version}.yaml")
    flow, hift = MlxFlow(FlowConfig.from_yaml(config["flow"])), MlxHiFT(HiFTConfig.from_yaml(config["hift"]))
    assert hasattr(flow, "pre_lookahead_layer") == (spec.flow_front == PRE_LOOKAHEAD)
    assert hasattr(flow, "encoder") == (spec.flow_front != PRE_LOOKAHEAD)
    assert hift.config.causal == (spec.stitcher == "causal") == hift.m_source._rules.nearest_phase
    assert isinstance(hift.default_noise, GaussianSourceNoise) == spec.random_vocoder_noise


@pytest.mark.parametrize("version", sorted(SPECS))
def test_the_text_front_end_follows_the_row(version):
    spec = spec_for(version)
    assert build_llm_text("cross_lingual", version, "Hello.").text == spec.system_prefix + "Hello."
    assert build_llm_text("zero_shot", version, "Hello.", "Hi there.").prompt_text == spec.system_prefix + "Hi there."
    if spec.pronunciation_markup:
        validate_markup("Say [h][ào] and [AY0].", version)
    else:
        with pytest.raises(SynthesisError, match="needs a CosyVoice3 model"):
            validate_markup("Say [h][ào] and [AY0].", version)


def test_an_unknown_version_is_named():
    with pytest.raises(ValueError, match="known: cosyvoice3, cosyvoice2"):
        spec_for("cosyvoice4")


@pytest.mark.parametrize("section", ["llm", "flow", "hift"])
def test_a_yaml_class_picks_its_row_and_an_unknown_one_is_named(section):
    for spec in SPECS.values():
        assert spec_for_class(getattr(spec, f"{section}_class"), section) is spec
    with pytest.raises(ConfigError, match=f"{section} class 'TransformerLM' is not supported; expected .+ or "):
        spec_for_class("TransformerLM", section)


def test_a_folder_whose_yaml_mixes_two_versions_is_refused_by_name(tmp_path):
    from cosyvoice_mac.pipeline.model_dir import ModelFolder, ModelFolderError

    folder = make_tiny_model_dir("cosyvoice3", tmp_path)
    assert ModelFolder.open(folder).version == "cosyvoice3"
    yaml = folder / "cosyvoice3.yaml"
    yaml.write_text(yaml.read_text().replace("CosyVoice3LM", "Qwen2LM"))
    with pytest.raises(ModelFolderError, match="llm section is a Qwen2LM, but a cosyvoice3 model has a CosyVoice3LM"):
        ModelFolder.open(folder)


def _version_names(node: ast.AST) -> list[str]:
    """The version names (``"cosyvoice2"``, ``"cosyvoice3"``) written as constants in ``node``."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in SPECS]


def test_no_module_but_versions_py_branches_on_a_version_name():
    """``version == "cosyvoice3"`` (or ``!=``, ``in``) anywhere else would be a row missing from the table."""
    branches = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "versions.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare) and _version_names(node):
                branches.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert branches == []


@pytest.mark.parametrize("folder", ["models", "mlx"])
def test_the_networks_never_name_a_version(folder):
    """The LLM, flow and vocoder modules (torch and MLX) get flags and ids from their row, never a name."""
    named = [
        f"{path.relative_to(PACKAGE)}:{name}"
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for name in _version_names(ast.parse(path.read_text()))
    ]
    assert named == []


# Where 24000 may stand as a number: the table itself, the official YAML transcribed for random-weight models,
# Opus's list of legal rates, and the torch networks (whose rates are their YAML's).
RATE_WRITTEN_WHERE = {"versions.py", "pipeline/fullsize.py", "api/audio_formats.py", "models/vocoder/source.py"}


def test_the_24_khz_rate_is_written_once():
    """Every module that needs the models' rate imports ``versions.SAMPLE_RATE``; a second 24000 would drift."""
    written = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in RATE_WRITTEN_WHERE
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == SAMPLE_RATE
    ]
    assert written == []
