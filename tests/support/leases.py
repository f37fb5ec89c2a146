"""An in-memory Lease store that behaves like the API server where it matters (404 on a missing Lease, 409
AlreadyExists on a second create, 409 Conflict on a replace carrying a stale resourceVersion), the simulated
world around it, and one candidate's view of the API."""

from __future__ import annotations

import copy

from kubernetes.client import V1Lease
from kubernetes.client.exceptions import ApiException


class InMemoryLeases:
    """Leases by (namespace, name) with a resourceVersion per write, like the API server's optimistic concurrency."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], V1Lease] = {}
        self.version = 0
        self.writes = 0

    def read(self, name: str, namespace: str) -> V1Lease:
        if (namespace, name) not in self.leases:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.leases[namespace, name])

    def _store(self, namespace: str, name: str, body: V1Lease) -> V1Lease:
        self.version += 1
        self.writes += 1
        stored = copy.deepcopy(body)
        stored.metadata.name, stored.metadata.namespace = name, namespace
        stored.metadata.resource_version = str(self.version)
        self.leases[namespace, name] = stored
        return copy.deepcopy(stored)

    def create(self, namespace: str, body: V1Lease) -> V1Lease:
        if (namespace, body.metadata.name) in self.leases:
            raise ApiException(status=409, reason="AlreadyExists")
        if body.metadata.resource_version:
            raise ApiException(status=400, reason="resourceVersion should not be set on objects to be created")
        return self._store(namespace, body.metadata.name, body)

    def replace(self, name: str, namespace: str, body: V1Lease) -> V1Lease:
        current = self.leases.get((namespace, name))
        if current is None:
            raise ApiException(status=404, reason="Not Found")
        if body.metadata.resource_version != current.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        return self._store(namespace, name, body)


class World:
    """True time, the store, and the candidates; `after_read` lets a test run other candidates between one
    candidate's read and its write (the race window)."""

    def __init__(self) -> None:
        self.t = 0.0
        self.store = InMemoryLeases()
        self.after_read: dict[str, list] = {}

    def advance(self, seconds: float) -> None:
        self.t += seconds


class CandidateApi:
    """One candidate's view of the API: can be cut off (`down`), and lets the world interleave after a read."""

    def __init__(self, world: World, who: str) -> None:
        self.world, self.who, self.down = world, who, False

    def _check(self) -> None:
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")

    def read_namespaced_lease(self, name, namespace, **kwargs):
        self._check()
        try:
            return self.world.store.read(name, namespace)
        finally:  # the answer (a lease or a 404) is on its way back while other candidates act
            for run in self.world.after_read.pop(self.who, []):
                run()

    def create_namespaced_lease(self, namespace, body, **kwargs):
        self._check()
        return self.world.store.create(namespace, body)

    def replace_namespaced_lease(self, name, namespace, body, **kwargs):
        self._check()
        return self.world.store.replace(name, namespace, body)
