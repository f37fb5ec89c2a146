"""Which of a task's streams its predicates link: the connected components of the predicate graph."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def components(streams: Sequence[str], links: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Groups of `streams` joined by chains of links, each group and the groups in `streams` order."""
    parent = {s: s for s in streams}

    def root(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for a, b in links:
        if a in parent and b in parent:
            parent[root(a)] = root(b)
    groups: dict[str, list[str]] = {}
    for s in streams:
        groups.setdefault(root(s), []).append(s)
    return list(groups.values())
