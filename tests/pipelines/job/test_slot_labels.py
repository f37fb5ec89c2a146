"""Slot labels, computed in Python, equal the labels Spark's own hash partitioner gives.

Slot s's label is the (s div n)-th smallest int Spark sends to partition (s mod n). The checkpoint's state is
keyed by these labels, so they must equal the ones earlier releases asked of Spark.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from windjoin.pipelines.job.join_job import hash_partition_labels


@pytest.mark.parametrize(("partitions", "slots"), [(2, 2), (2, 9), (8, 8), (200, 64), (7, 30)])
def test_labels_equal_the_smallest_ints_spark_places_on_each_partition(spark, partitions, slots):
    rows = (
        spark.range(0, 64 * max(partitions, slots))
        .select(F.col("id").cast("int").alias("label"))
        .select("label", F.expr(f"pmod(hash(label), {partitions})").alias("p"))
        .groupBy("p")
        .agg(F.sort_array(F.collect_list("label")).alias("labels"))
        .collect()
    )
    by_partition = {row["p"]: row["labels"] for row in rows}
    spark_labels = tuple(by_partition[s % partitions][s // partitions] for s in range(slots))
    assert hash_partition_labels(partitions, slots) == spark_labels
    assert len(set(spark_labels)) == slots
