"""Text frontend parity: manifest ``frontend_text_normalize`` cases and every version's ``tokenizer_cases``.

Normalisation cases are version-independent; the manifest measured English lengths with the tiny tokenizer, so
they run once (under cosyvoice3) counting tokens with the cosyvoice3 tiny tokenizer. Tokenizer cases run for
the tokenizer.json folder and for a vocab.json + merges.txt folder derived from it (the real BlankEN layout).
"""

from __future__ import annotations

import json
import tempfile
from functools import lru_cache
from pathlib import Path

from cosyvoice_mac.frontend.text import TextNormalizer
from cosyvoice_mac.frontend.tokenizer import SpeechTextTokenizer
from tests.parity.common import ParityContext, parity_dir

BLANK_EN = "CosyVoice-BlankEN"


def _manifest() -> dict:
    path = parity_dir() / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


@lru_cache(maxsize=None)
def _tokenizer(folder: str, version: str) -> SpeechTextTokenizer:
    return SpeechTextTokenizer.from_dir(folder, version)


def write_vocab_merges_folder(tokenizer_json: Path, target: Path) -> Path:
    """The released-BlankEN layout (vocab.json, merges.txt, tokenizer_config.json) of a tokenizer.json."""
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    added = {entry["content"]: entry["id"] for entry in data["added_tokens"]}
    vocab = {token: i for token, i in data["model"]["vocab"].items() if token not in added}
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    target.mkdir(parents=True, exist_ok=True)
    (target / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (target / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    config = {"added_tokens_decoder": {str(i): {"content": c, "special": True} for c, i in added.items()}}
    (target / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return target


def _tokenizer_cases(ctx: ParityContext) -> list[dict]:
    return ctx.file_entry(f"{ctx.version}_tiny/vectors/inputs.safetensors")["tokenizer_cases"]["cases"]


def _check_ids(tokenizer: SpeechTextTokenizer, cases: list[dict], what: str) -> None:
    for case in cases:
        ids = tokenizer.encode(case["text"])
        assert ids == case["ids"], f"{what} {case['text']!r}: {ids} != {case['ids']}"


def _check_tokenizer_json(ctx: ParityContext) -> None:
    tokenizer = _tokenizer(str(ctx.model_dir / BLANK_EN), ctx.version)
    _check_ids(tokenizer, _tokenizer_cases(ctx), f"{ctx.version} tokenizer.json")


def _check_vocab_merges(ctx: ParityContext) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_vocab_merges_folder(ctx.model_dir / BLANK_EN / "tokenizer.json", Path(tmp) / BLANK_EN)
        tokenizer = SpeechTextTokenizer.from_dir(folder, ctx.version)
        _check_ids(tokenizer, _tokenizer_cases(ctx), f"{ctx.version} vocab.json+merges.txt")


def _normalizer(ctx: ParityContext) -> TextNormalizer:
    counter = _tokenizer(str(ctx.root / "cosyvoice3_tiny" / BLANK_EN), "cosyvoice3")
    return TextNormalizer(lambda text: len(counter.encode(text)))


def _normalize_check(index: int, split: bool):
    def check(ctx: ParityContext) -> None:
        case = ctx.manifest["frontend_text_normalize"]["cases"][index]
        actual = _normalizer(ctx).normalize(case["input"], split=split)
        expected = case["split_true"] if split else [case["split_false"]]
        assert actual == expected, f"normalize({case['input']!r}, split={split}): {actual!r} != {expected!r}"

    return check


_TOKENIZER_CASES = {"tokenizer_json": _check_tokenizer_json, "tokenizer_vocab_merges": _check_vocab_merges}
_NORMALIZE_CASES = {
    f"normalize_{index}_split_{str(split).lower()}": _normalize_check(index, split)
    for index in range(len(_manifest().get("frontend_text_normalize", {}).get("cases", [])))
    for split in (True, False)
}

CASES_BY_VERSION = {
    "cosyvoice2": dict(_TOKENIZER_CASES),
    "cosyvoice3": {**_TOKENIZER_CASES, **_NORMALIZE_CASES},
}
