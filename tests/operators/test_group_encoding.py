"""A partition group has one JSON form and one text form, and every store reads back what it wrote."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from windjoin.operators.partitioning import Group, RoutingTable

groups = st.integers(0, 6).flatmap(
    lambda depth: st.builds(Group, st.integers(0, 70_000), st.just(depth), st.integers(0, (1 << depth) - 1))
)


@given(groups)
def test_both_forms_round_trip(group: Group):
    assert Group.from_json(group.to_json()) == group
    assert Group.from_key(group.key) == group


def test_the_forms_name_a_whole_partition_by_its_number():
    assert Group(13).to_json() == [13, 0, 0] and Group(13).key == "13"
    assert Group(3, 2, 1).to_json() == [3, 2, 1] and Group(3, 2, 1).key == "3.2.1"


def test_a_routing_table_carries_its_mini_groups_in_the_json_form():
    table = RoutingTable(2, (0, 1, 0, 1), ((Group(3, 1, 0), 1), (Group(3, 1, 1), 0)))
    assert table.to_json()["split"] == [[3, 1, 0, 1], [3, 1, 1, 0]]
    assert RoutingTable.from_json(table.to_json()) == table
