"""``python -m cosyvoice_mac``: the ``cosyvoice-mac`` command."""

from cosyvoice_mac.app import main

raise SystemExit(main())
