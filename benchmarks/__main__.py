"""``python -m benchmarks``: see benchmarks/cli.py and benchmarks/README.md."""

from benchmarks.cli import main

raise SystemExit(main())
