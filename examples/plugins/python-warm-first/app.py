"""warm-first: a sandfleet placement policy in Python.

A claim goes to the healthy cluster with the most warm sandboxes of its
image ready to be claimed. A pool, or a claim for which nothing is warm,
goes to the healthy cluster with a free slot that runs the fewest of this
host's sandboxes, preferring a cluster that already holds the image; the
lowest index wins any remaining tie. With no healthy cluster left, or none
with a free slot, the policy declines (`unsatisfiable`), and the host tries
again later.

Build (see README.md): componentize-py -d wit -w placement-policy componentize app -o warm-first.wasm
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.placement import Clusters, Demand, DemandKind
from wit_world.imports import host
from wit_world.imports.types import Failure, FailureKind


class Placement(exports.Placement):
    def place(self, demand: Demand, clusters: Clusters) -> int:
        count = len(clusters.free_slots)
        if count == 0:
            raise Err(Failure(FailureKind.INVALID_INPUT, "no clusters to place on"))
        unhealthy = set(clusters.unhealthy)
        healthy = [i for i in range(count) if i not in unhealthy]
        if demand.kind == DemandKind.CLAIM:
            warm = [i for i in healthy if clusters.warm_ready[i] > 0]
            if warm:
                return max(warm, key=lambda i: (clusters.warm_ready[i], -i))
        open_clusters = [i for i in healthy if clusters.free_slots[i] > 0]
        if not open_clusters:
            host.log(host.LogLevel.DEBUG, f"no healthy cluster with a free slot among {count}")
            raise Err(Failure(FailureKind.UNSATISFIABLE, "no healthy cluster has a free slot"))
        holding = set(clusters.with_image)
        return min(open_clusters, key=lambda i: (clusters.live[i], i not in holding, i))
