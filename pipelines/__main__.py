"""``python -m pipelines``: list the runnable jobs and how to start them."""

from __future__ import annotations

import sys

JOBS = {
    "live": "make run: Kafka -> team_scores on Spark (streaming) -> Kafka, live leaderboard",
    "team_scores": "per-team score sums, fixed windows, early/on-time/late panes (--source kafka)",
    "page_views": "views per page in sliding windows; failed or slow loads as alerts",
    "sensor_average": "mean per sensor over sliding windows or count windows",
    "generator": "write seeded events (JSON lines or CSV) with late and out-of-order records",
}


def main() -> int:
    """Print the job list; returns the exit code."""
    print("Jobs (each: python -m pipelines.<job> --help):")
    for job, what in JOBS.items():
        print(f"  {job:<15} {what}")
    print("\nExample: python -m pipelines.team_scores --runner SparkRunner --events 500")
    return 0


if __name__ == "__main__":
    sys.exit(main())
