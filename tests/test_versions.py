"""versions.py is the one table of what differs between CosyVoice2 and CosyVoice3: the loaded networks and
the text front end must behave exactly as their row says (so a reader can trust that one screen)."""

from __future__ import annotations

import pytest

from cosyvoice_mac.errors import SynthesisError
from cosyvoice_mac.frontend.markup import build_llm_text, validate_markup
from cosyvoice_mac.versions import SPECS, spec_for
from tests.fakes.onnx_models import make_tiny_model_dir


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


def test_the_flow_front_end_and_the_vocoder_noise_follow_the_row(model):
    spec, flow = model.spec, model.networks.flow
    assert hasattr(flow, "pre_lookahead_layer") == (spec.flow_front == "pre_lookahead")
    assert hasattr(flow, "encoder") == (spec.flow_front == "conformer")
    assert (model._noise(5, 0) is not None) == spec.random_vocoder_noise


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
