"""Beam's own Nexmark in the benchmark: queries 0, 1, 2 and a keyed windowed sum, as Beam
writes them (its parser, its query modules, its monitors), on a generated event file.

- :mod:`~bench.nexmark.events`: the events (Nexmark's proportions and field ranges, a
  fixed seed) as the JSON lines ``ParseJsonEventFn`` reads, written once per run and size.
- :mod:`~bench.nexmark.queries`: what each workload computes, its answer (the values it
  writes, whatever their formatting) and a plain Python loop's.
- :mod:`~bench.nexmark.pipelines`: the Beam pipelines, built as Beam's ``nexmark_launcher``
  builds them, with a text sink.
- :mod:`~bench.nexmark.baselines`: the same, written by hand with RDDs and a DataFrame.

``python -m bench --workloads nexmark_q0,nexmark_q1,nexmark_q2,nexmark_windowed_sum`` runs
them on every engine (they are part of ``make bench`` and ``make bench-full``).
"""
