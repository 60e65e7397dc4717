"""The live demo (``make run``, ``python -m pipelines.live``): team_scores on the SparkRunner in
streaming, from Kafka to Kafka, with a live leaderboard.

* :mod:`~pipelines.live.demo`: the orchestrator: broker, topics, producer, the job, the end.
* :mod:`~pipelines.live.kafka_topics`: the demo's topics, its producer and its pane reader.
* :mod:`~pipelines.live.leaderboard`: the board: the latest pane per team and window.
* :mod:`~pipelines.live.console`: the live view and the run's summary on the terminal.
* :mod:`~pipelines.live.report`: the job's per-batch report, read as it is written.
* :mod:`~pipelines.live.pictures`: the run's pane diagram and throughput, drawn at the end.
"""
