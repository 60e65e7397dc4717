"""Beam's own Nexmark in the benchmark: queries 0, 1, 2 and a keyed windowed sum, as Beam
writes them (its parser, its query modules, its monitors), on a generated event file.

- :mod:`~bench.nexmark.events`: the events (Nexmark's proportions and field ranges, a
  fixed seed) as the JSON lines ``ParseJsonEventFn`` reads, written once per run and size.
- :mod:`~bench.nexmark.queries`: what each workload computes, its answer (the values it
  writes, whatever their formatting) and a plain Python loop's.
- :mod:`~bench.nexmark.pipelines`: the Beam pipelines, built as Beam's ``nexmark_launcher``
  builds them, with a text sink.
- :mod:`~bench.nexmark.baselines`: the same, written by hand with RDDs and a DataFrame.

Where an event's CPU goes (``python -m bench.nexmark.profile``), per fused stage and step:

- :mod:`~bench.nexmark.meters`: meters on every function the SparkRunner runs over a
  partition, in Spark's Python workers (its own CPU, optionally a cProfile);
- :mod:`~bench.nexmark.attribution`: a profile split by step and by kind of work;
- :mod:`~bench.nexmark.profile`: the command, with the hand-written RDD program beside;
- :mod:`~bench.nexmark.floors` (``python -m bench.nexmark.floors``): the same queries' own
  code per event on one core outside any runner, the floor a runner can approach.

``python -m bench --workloads nexmark_q0,nexmark_q1,nexmark_q2,nexmark_windowed_sum`` runs
them on every engine (they are part of ``make bench`` and ``make bench-full``).
"""
