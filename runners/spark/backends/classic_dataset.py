"""Classic Spark's datasets: RDDs of the runner's records (PySpark pickles them)."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from runners.spark.backends.base import Dataset, IndexedPartitionFunction, PartitionFunction


class ClassicDataset(Dataset):
    """An RDD of the runner's records."""

    def __init__(self, rdd: Any) -> None:
        self.rdd = rdd

    def map_partitions(self, function: PartitionFunction) -> "ClassicDataset":
        return ClassicDataset(self.rdd.mapPartitions(function))

    def map_partitions_with_index(self, function: IndexedPartitionFunction) -> "ClassicDataset":
        return ClassicDataset(self.rdd.mapPartitionsWithIndex(function))

    def filter(self, predicate: Callable[[Any], bool]) -> "ClassicDataset":
        return ClassicDataset(self.rdd.filter(predicate))

    def map(self, function: Callable[[Any], Any]) -> "ClassicDataset":
        return ClassicDataset(self.rdd.map(function))

    def partition_by(self, partitions: int) -> "ClassicDataset":
        return ClassicDataset(self.rdd.partitionBy(partitions, identity).values())

    def group_by_key(self, partitions: int, partition_of: Callable[[Any], int]) -> "ClassicDataset":
        return ClassicDataset(self.rdd.groupByKey(partitions, partitionFunc=partition_of))

    def coalesce(self, partitions: int) -> "ClassicDataset":
        if self.rdd.getNumPartitions() <= partitions:
            return self
        return ClassicDataset(self.rdd.coalesce(partitions))


def identity(number: int) -> int:
    return number


def keyed_by_partition(partition: int, records: Iterable[Any]) -> Iterable[Any]:
    return ((partition, record) for record in records)
