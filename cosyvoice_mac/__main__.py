from cosyvoice_mac.cli import main

raise SystemExit(main())
