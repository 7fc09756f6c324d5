"""Sampling settings (temperature, top-p, top-k, repetition window): one rule for every door, the model's own by
default, the sampler's draws steered by them, the page's and the CLI's controls mapped through the same rule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.models.llm.sampling import RasSampler
from cosyvoice_mac.models.llm.speech_lm import SpeechLM
from cosyvoice_mac.pipeline.backend import sampler_settings
from cosyvoice_mac.request import Request, Sampling, Voice
from cosyvoice_mac.settings import setting


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"temperature": 0.2}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": True}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": "25"}, "top_k"),
        ({"repetition_window": 51}, "repetition_window"),
    ],
)
def test_a_setting_out_of_its_range_is_refused_naming_it(given, field):
    with pytest.raises(RequestError) as caught:
        Request.build("Hello.", Voice.builtin(), seed=0, sampling=Sampling.build(**given))
    row = setting(field)
    assert caught.value.field == field and caught.value.code == "sampling_invalid"
    assert f"{row.low:g} to {row.high:g}" in str(caught.value)


def test_the_ends_of_each_range_and_whole_floats_are_taken_and_nothing_given_is_the_models_own():
    low = Sampling.build(temperature=0.5, top_p=0.1, top_k=1.0, repetition_window=1.0)
    assert (low.top_k, low.repetition_window) == (1, 1) and isinstance(low.top_k, int)
    Sampling.build(temperature=1.5, top_p=1.0, top_k=100, repetition_window=50)
    request = Request.build("Hello.", Voice.builtin(), seed=0)
    assert request.sampling == Sampling() and request.sampling.given() == {}
    assert request.sampling.as_dict() == dict.fromkeys(("temperature", "top_p", "top_k", "repetition_window"))
    assert sampler_settings(Sampling(top_k=5, repetition_window=20)) == {"top_k": 5, "win_size": 20}


def test_the_sampler_takes_the_models_own_settings_unless_a_request_gives_its_own():
    own = SimpleNamespace(config=SimpleNamespace(top_p=0.8, top_k=25, win_size=10, tau_r=0.1))
    sampler = SpeechLM.make_sampler(own, seed=1)
    assert (sampler.top_p, sampler.top_k, sampler.win_size, sampler.temperature) == (0.8, 25, 10, 1.0)
    asked = SpeechLM.make_sampler(own, seed=1, **sampler_settings(Sampling(0.7, 0.5, 3, 20)))
    assert (asked.top_p, asked.top_k, asked.win_size, asked.temperature, asked.tau_r) == (0.5, 3, 20, 0.7, 0.1)


def test_a_lower_temperature_draws_the_likeliest_token_more_often():
    logp = torch.log_softmax(torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0]), dim=0)

    def share_of_the_first(temperature: float) -> float:
        sampler = RasSampler(top_p=1.0, top_k=5, win_size=1, tau_r=100.0, temperature=temperature, seed=0)
        return sum(sampler(logp, []) == 0 for _ in range(400)) / 400

    cold, own, hot = share_of_the_first(0.5), share_of_the_first(1.0), share_of_the_first(1.5)
    assert cold > own + 0.1 and own > hot + 0.05
    plain = RasSampler(top_p=1.0, top_k=5, win_size=1, tau_r=100.0, seed=0)
    same = RasSampler(top_p=1.0, top_k=5, win_size=1, tau_r=100.0, temperature=1.0, seed=0)
    assert [plain(logp, []) for _ in range(50)] == [same(logp, []) for _ in range(50)]


def test_the_page_maps_its_controls_through_the_same_rule():
    from cosyvoice_mac.webui.sampling_controls import sampling_settings

    assert sampling_settings(False, 0.1, 5.0, 0, 0) == Sampling()  # off: the model's own, whatever the sliders say
    assert sampling_settings(True, 0.9, 0.7, 30.0, 12.0) == Sampling(0.9, 0.7, 30, 12)
    with pytest.raises(RequestError, match="top_k"):
        sampling_settings(True, 1.0, 0.8, 0, 10)


def test_the_cli_takes_the_tables_flags_and_refuses_by_the_same_rule():
    from cosyvoice_mac.cli.main import _request, build_parser

    base = ["synth", "--voice", "preview", "--text", "Hello.", "--out", "x.wav", "--seed", "1"]
    args = build_parser().parse_args([*base, "--temperature", "0.9", "--top-k", "30", "--repetition-window", "12"])
    assert _request(args).sampling == Sampling(temperature=0.9, top_k=30, repetition_window=12)
    with pytest.raises(RequestError, match="top_p"):
        _request(build_parser().parse_args([*base, "--top-p", "1.5"]))


def test_the_long_form_commands_take_the_same_flags_and_refuse_before_anything_is_sent(tmp_path, capsys):
    from cosyvoice_mac.cli.main import build_parser, main

    lines = tmp_path / "lines.txt"
    lines.write_text("One.\nTwo.\n")
    unreachable = ("--server", "http://127.0.0.1:9")  # nothing is sent: the flags are refused first
    for command in (["batch", str(lines), "--out-dir", "b"], ["dub", str(lines), "--voice", "A", "--out", "x"]):
        assert build_parser().parse_args([*command, "--top-k", "30"]).top_k == 30
    assert main(["batch", str(lines), "--out-dir", str(tmp_path / "b"), "--top-k", "0", *unreachable]) == 2
    assert "error: --top-k: top_k 0 must be a whole number from 1 to 100" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    synth = ["synth", "--voice", "preview", "--text", "Hi [pase 500ms] there.", "--out", str(tmp_path / "s.wav")]
    assert main([*synth, *unreachable]) == 2  # a malformed tag, said before the app is asked
    assert "error: --text: [pase 500ms] is not a tag (at character 4)" in capsys.readouterr().err
