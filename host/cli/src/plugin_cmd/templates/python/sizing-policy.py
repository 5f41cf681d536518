"""{{name}}: a sandfleet sizing policy.

Warms one sandbox per task of each image, at most max-warmpool-size, all
images in one window (none with the `none` strategy).
"""

from typing import List

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.sizing import FleetPlan, Limits, Strategy, Window
from wit_world.imports.types import Failure, FailureKind


class Sizing(exports.Sizing):
    def plan(self, tasks: List[int], limits: Limits) -> FleetPlan:
        if limits.max_concurrent == 0:
            raise Err(Failure(FailureKind.INVALID_INPUT, "max-concurrent must be at least 1"))
        if limits.strategy == Strategy.NONE:
            replicas = [0 for _ in tasks]
        else:
            replicas = [min(count, limits.max_warmpool_size) for count in tasks]
        images = [image for image, count in enumerate(tasks) if count > 0]
        windows = [Window(images=images)] if images else []
        return FleetPlan(replicas=replicas, windows=windows, peak_warm=sum(replicas))
