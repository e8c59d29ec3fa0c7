"""``python -m benchmarks.micro``: see benchmarks/micro/bench.py."""

from benchmarks.micro.bench import main

raise SystemExit(main())
