"""{{name}}: a sandfleet placement policy.

Picks the healthy cluster with the most free slots (every cluster counts
when none is healthy); the lowest index wins a tie.
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.placement import Clusters, Demand
from wit_world.imports.types import Failure, FailureKind


class Placement(exports.Placement):
    def place(self, demand: Demand, clusters: Clusters) -> int:
        count = len(clusters.free_slots)
        unhealthy = set(clusters.unhealthy)
        candidates = [i for i in range(count) if i not in unhealthy] or list(range(count))
        if not candidates:
            raise Err(Failure(FailureKind.INVALID_INPUT, "no clusters to place on"))
        # max() keeps the first of equal keys, so the lowest index wins a tie.
        return max(candidates, key=lambda i: clusters.free_slots[i])
