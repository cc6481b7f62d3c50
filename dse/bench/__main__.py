"""``python -m dse.bench``: the kernel, table and sweep benchmarks (:mod:`dse.bench.kernels`)."""

from dse.bench.kernels import main

raise SystemExit(main())
