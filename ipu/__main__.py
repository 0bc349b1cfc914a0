from ipu.cli import main

raise SystemExit(main())
