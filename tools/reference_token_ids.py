"""Write the reference tokenizer's ids of the markup texts in tests/parity/reference_token_ids.json.

Run with the upstream reference's Python (built by ../shared/refharness/setup.sh), from its source folder:

    cd ~/.cache/cosyvoice-reference/src/CosyVoice
    ~/.cache/cosyvoice-reference/venv/bin/python /path/to/checkout/tools/reference_token_ids.py

It reads the texts from the JSON file, encodes each with ``get_qwen_tokenizer`` for both versions (the
parity folder's tiny tokenizer) and writes the ids back; tests/test_reference_token_ids.py compares ours.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "parity" / "reference_token_ids.json"


def main() -> int:
    sys.path.insert(0, os.getcwd())  # the reference's source folder (it is not an installed package)
    from cosyvoice.tokenizer.tokenizer import get_qwen_tokenizer

    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    parity = Path(os.environ.get("COSYVOICE_PARITY_DIR", Path(__file__).resolve().parents[2] / "shared" / "parity"))
    folder = str(parity / document["tokenizer_folder"])
    for version in ("cosyvoice2", "cosyvoice3"):
        tokenizer = get_qwen_tokenizer(folder, skip_special_tokens=True, version=version)
        document["ids"][version] = {name: tokenizer.encode(text) for name, text in document["texts"].items()}
    FIXTURE.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
