"""``make bench``: the speed benchmarks, kept apart from the model code.

* :mod:`dse.bench.kernels` (``python -m dse.bench``): configs/s of every task's kernel, tables of repeated and of
  distinct rows, the sweep runner on small and 10⁹-point spaces, ``--keep`` reductions and ``dse validate``;
* :mod:`dse.bench.pareto` (``python -m dse.bench.pareto``): the vectorized Pareto front on 10⁷ rows;
* ``figures.json``: the figures the last ``make bench`` measured, from which the README's speed table is
  generated (a test checks that the two agree).
"""
