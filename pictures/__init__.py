"""Pictures: figures drawn from plain data, with matplotlib; nothing here runs a job.

* :mod:`~pictures.diagram`: what is drawn (a pane diagram, the batches of a run).
* :mod:`~pictures.plots`: the pane diagram and throughput figures.
* :mod:`~pictures.bench_figure`: the benchmark figure (``python -m pictures.bench_figure``).
"""
