"""A fused stage's element-wise steps compiled into one function per run of them: the
runner's own operation for what Beam's SDK harness would run step by step.

What a fused stage holds. Beam's fusion (the FnApiRunner's phases, which the runner reuses)
makes a stage of everything between two shuffles: an input (the decode of a shuffle's or a
runner-side read's elements, or an impulse), the bounded read's splittable DoFn (pair with
restriction, split, process), ``ParDo`` s (Maps, Filters, user DoFns: parsers, monitors,
timestamping, formatting), ``WindowInto`` s, flattens, a lifted combine's precombine before
the shuffle or its merge and extract after it, and the outputs (a shuffle's write, a side
input's). The SDK harness runs each step as an ``Operation``: per element and step a
``WindowedValue``, a consumer set counting it, a DoFn runner, an invoker binding
``process``'s parameters, an output handler. Most of that is bookkeeping the runner can
do once per run of steps.

The design:

- Planning (:mod:`~runners.spark.chains.planning`, on the driver) finds, in each stage's
  descriptor, the runs of steps each feeding only the next that the compiled form
  expresses, and replaces each by one transform holding them as they were.
  :func:`~runners.spark.chains.planning.why_not_chained` says why a step keeps Beam's
  operation: side inputs, state, timers, a splittable DoFn (and its residuals), batches,
  several outputs, bundle finalization, runtime type checks, a ``process`` parameter other
  than the element's timestamp, window and pane (key, windowed value, contexts...). A
  ``ParDo`` whose ``process`` asks for its timestamp, window or pane is chained, as is a
  DoFn with ``start_bundle``/``finish_bundle``, ``setup``/``teardown`` and user metrics
  (Nexmark's ``Monitor`` and its parser are the typical shape), a ``WindowInto`` of a
  standard WindowFn, and a lifted combine's precombine at a run's end.
- In the task, one operation (:mod:`~runners.spark.chains.operation`) runs the run of
  steps (:mod:`~runners.spark.chains.steps`: each step's call as Beam's invoker makes it)
  through one function written and compiled for it (:mod:`~runners.spark.chains.code`,
  its window steps' code by :mod:`~runners.spark.chains.window_code`):
  each element's value goes through the steps' functions in nested blocks, carried with
  the ``WindowedValue`` whose timestamp, windows and pane it has, a new one made only
  where a step changes them (a ``TimestampedValue``, a ``WindowInto``, an invocation per
  window). Parameters are bound from that carrier: one ``Timestamp`` per carrier shared
  by every step that reads it (a ``TimestampedValue``'s own, as Beam's output handler
  keeps it), the window of the invocation, the pane. Bundle methods run
  in Beam's order (started last to first, finished first to last, what ``finish_bundle``
  outputs going through the steps after it); metrics go to the running step's cells;
  element counts and sampled sizes of every PCollection between the steps are kept as
  Beam's consumer sets keep them; errors
  name the step as Beam's ``DoFnRunner`` does. :mod:`~runners.spark.chains.precombine`
  ends a run with the precombine's table, :mod:`~runners.spark.chains.window_assignment`
  assigns the standard WindowFns' windows by integer arithmetic, inside a run or alone.
- Beam's operations stay for what the compiled form does not express (the refusals
  above), and around it: the stage's input decode, the read, the shuffle's write. A bulk
  text read hands a chain its lines a block at a time, and a chain hands the text sink's
  writing step its values a block at a time (:mod:`~runners.spark.chains.blocks`). Batch
  and streaming run the same stages (a micro-batch runs the stage's descriptor), on
  classic Spark and Spark Connect alike (all of it runs in the task's Python worker).
  ``--chain_simple_steps false`` runs every step as Beam's own operation.
"""
