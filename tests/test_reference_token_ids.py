"""Markup token ids taken from the upstream reference's tokenizer, not from our own table.

``tests/parity/reference_token_ids.json`` holds the ids the reference's ``get_qwen_tokenizer`` gives
for pinyin, ARPAbet, paralinguistic tags, ``<strong>`` and ``<|endofprompt|>`` with both versions'
special tokens (made by tools/reference_token_ids.py through ../shared/refharness). A change to our
special-token table, its order or the way markup is split fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosyvoice_mac.frontend.tokenizer import SpeechTextTokenizer
from tests.parity.common import parity_dir

REFERENCE = json.loads((Path(__file__).parent / "parity" / "reference_token_ids.json").read_text(encoding="utf-8"))
FOLDER = parity_dir() / REFERENCE["tokenizer_folder"]
pytestmark = pytest.mark.skipif(not FOLDER.is_dir(), reason="tiny parity tokenizer not available")


@pytest.mark.parametrize("version", ["cosyvoice2", "cosyvoice3"])
@pytest.mark.parametrize("name", sorted(REFERENCE["texts"]))
def test_markup_ids_equal_the_reference_tokenizer(version, name):
    tokenizer = SpeechTextTokenizer.from_dir(FOLDER, version)
    assert tokenizer.encode(REFERENCE["texts"][name]) == REFERENCE["ids"][version][name], REFERENCE["texts"][name]
