"""``python -m writer.cli``: the ``memarc`` command line."""

from writer.cli import main

raise SystemExit(main())
