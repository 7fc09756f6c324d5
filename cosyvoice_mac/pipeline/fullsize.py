"""Official full-size hyper-parameters, for building models with random weights.

Used by benchmarks (compute does not depend on weight values) and never chosen silently:
callers ask for random weights by name. The values are the released configs' (spec section 2),
written in the same plain-data form that :func:`cosyvoice_mac.config.read_yaml_config` returns.
"""

from __future__ import annotations

import copy

QWEN2_0_5B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}

_SAMPLING = {
    "_tag": "name:cosyvoice.utils.common.ras_sampling",
    "top_p": 0.8,
    "top_k": 25,
    "win_size": 10,
    "tau_r": 0.1,
}

_CFM = {
    "_tag": "new:cosyvoice.flow.flow_matching.CausalConditionalCFM",
    "in_channels": 240,
    "n_spks": 1,
    "spk_emb_dim": 80,
    "cfm_params": {
        "_tag": "new:omegaconf.DictConfig",
        "content": {
            "sigma_min": 1e-06,
            "solver": "euler",
            "t_scheduler": "cosine",
            "training_cfg_rate": 0.2,
            "inference_cfg_rate": 0.7,
        },
    },
}


def _hift(tag: str, f0_tag: str, extra: dict) -> dict:
    return {
        "_tag": f"new:cosyvoice.hifigan.generator.{tag}",
        "in_channels": 80,
        "base_channels": 512,
        "nb_harmonics": 8,
        "sampling_rate": 24000,
        "nsf_alpha": 0.1,
        "nsf_sigma": 0.003,
        "nsf_voiced_threshold": 10,
        "upsample_rates": [8, 5, 3],
        "upsample_kernel_sizes": [16, 11, 7],
        "istft_params": {"n_fft": 16, "hop_len": 4},
        "resblock_kernel_sizes": [3, 7, 11],
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "source_resblock_kernel_sizes": [7, 7, 11],
        "source_resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "lrelu_slope": 0.1,
        "audio_limit": 0.99,
        **extra,
        "f0_predictor": {
            "_tag": f"new:cosyvoice.hifigan.f0_predictor.{f0_tag}",
            "num_class": 1,
            "in_channels": 80,
            "cond_channels": 512,
        },
    }


def _feat_extractor(fmax):
    return {
        "_tag": "name:matcha.utils.audio.mel_spectrogram",
        "n_fft": 1920,
        "num_mels": 80,
        "sampling_rate": 24000,
        "hop_size": 480,
        "win_size": 1920,
        "fmin": 0,
        "fmax": fmax,
        "center": False,
    }


_FLOW_COMMON = {
    "output_size": 80,
    "spk_embed_dim": 192,
    "output_type": "mel",
    "vocab_size": 6561,
    "input_frame_rate": 25,
    "token_mel_ratio": 2,
    "pre_lookahead_len": 3,
}

_COSYVOICE3 = {
    "sample_rate": 24000,
    "llm_input_size": 896,
    "llm_output_size": 896,
    "spk_embed_dim": 192,
    "token_frame_rate": 25,
    "token_mel_ratio": 2,
    "chunk_size": 25,
    "num_decoding_left_chunks": -1,
    "llm": {
        "_tag": "new:cosyvoice.llm.llm.CosyVoice3LM",
        "llm_input_size": 896,
        "llm_output_size": 896,
        "speech_token_size": 6561,
        "mix_ratio": [5, 15],
        "llm": {"_tag": "new:cosyvoice.llm.llm.Qwen2Encoder", "pretrain_path": ""},
        "sampling": _SAMPLING,
    },
    "flow": {
        "_tag": "new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT",
        "input_size": 80,
        **_FLOW_COMMON,
        "pre_lookahead_layer": {
            "_tag": "new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer",
            "in_channels": 80,
            "channels": 1024,
            "pre_lookahead_len": 3,
        },
        "decoder": {
            **_CFM,
            "estimator": {
                "_tag": "new:cosyvoice.flow.DiT.dit.DiT",
                "dim": 1024,
                "depth": 22,
                "heads": 16,
                "dim_head": 64,
                "ff_mult": 2,
                "mel_dim": 80,
                "mu_dim": 80,
                "spk_dim": 80,
                "out_channels": 80,
                "static_chunk_size": 50,
                "num_decoding_left_chunks": -1,
            },
        },
    },
    "hift": _hift("CausalHiFTGenerator", "CausalConvRNNF0Predictor", {"conv_pre_look_right": 4}),
    "feat_extractor": _feat_extractor(None),
    "get_tokenizer": {
        "_tag": "name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer",
        "skip_special_tokens": True,
        "version": "cosyvoice3",
    },
}

_COSYVOICE2 = {
    **{key: value for key, value in _COSYVOICE3.items() if key not in ("llm", "flow", "hift")},
    "llm": {**_COSYVOICE3["llm"], "_tag": "new:cosyvoice.llm.llm.Qwen2LM"},
    "flow": {
        "_tag": "new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec",
        "input_size": 512,
        **_FLOW_COMMON,
        "encoder": {
            "_tag": "new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder",
            "output_size": 512,
            "attention_heads": 8,
            "linear_units": 2048,
            "num_blocks": 6,
            "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1,
            "attention_dropout_rate": 0.1,
            "normalize_before": True,
            "input_layer": "linear",
            "pos_enc_layer_type": "rel_pos_espnet",
            "selfattention_layer_type": "rel_selfattn",
            "input_size": 512,
            "use_cnn_module": False,
            "macaron_style": False,
            "static_chunk_size": 25,
        },
        "decoder": {
            **_CFM,
            "estimator": {
                "_tag": "new:cosyvoice.flow.decoder.CausalConditionalDecoder",
                "in_channels": 320,
                "out_channels": 80,
                "channels": [256],
                "dropout": 0.0,
                "attention_head_dim": 64,
                "n_blocks": 4,
                "num_mid_blocks": 12,
                "num_heads": 8,
                "act_fn": "gelu",
                "static_chunk_size": 50,
                "num_decoding_left_chunks": -1,
            },
        },
    },
    "hift": _hift("HiFTGenerator", "ConvRNNF0Predictor", {}),
    "feat_extractor": _feat_extractor(8000),
    "get_tokenizer": {"_tag": "name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer", "skip_special_tokens": True},
}

_CONFIGS = {"cosyvoice3": _COSYVOICE3, "cosyvoice2": _COSYVOICE2}


def official_config(version: str) -> dict:
    """A fresh copy of the released YAML's inference-relevant values for ``version``."""
    if version not in _CONFIGS:
        raise ValueError(f"unknown model version {version!r}; expected one of {sorted(_CONFIGS)}")
    return copy.deepcopy(_CONFIGS[version])
