"""Element-only steps run as the runner's own operations: chains of simple steps as one
loop, windows assigned natively, a lifted combine's precombine at a chain's end.

Inside a fused stage, Beam's SDK harness gives every step an ``Operation`` whose per-element
cost (receivers, counters, a ``WindowedValue`` per output) is paid once per step. A run of
steps that need only their element is planned on the driver
(:mod:`~runners.spark.chains.planning`) and executed in the task by one operation
(:mod:`~runners.spark.chains.operation`) that calls a function written for the chain
(:mod:`~runners.spark.chains.code`), optionally ending in a precombine
(:mod:`~runners.spark.chains.precombine`). :mod:`~runners.spark.chains.window_assignment`
assigns the standard WindowFns' windows by integer arithmetic, inside a chain or alone.
"""
