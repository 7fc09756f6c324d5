"""Start the CosyVoice for Mac web UI: ``python app.py [--host HOST] [--port PORT]`` (``bash run.sh`` does this)."""

import sys

from cosyvoice_mac.app import serve

if __name__ == "__main__":
    sys.exit(serve())
