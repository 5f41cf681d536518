"""GRPO-style rollouts: 256 at once, in groups of 8 forked from one setup.

Each group takes a task of the quickstart's dataset, sets it up once in a
lease (the adapter's setup runs as the lease is acquired), snapshots it and
forks 8 leases from the snapshot: the group's rollouts start from the same
files without paying the setup 8 times. Where the backend cannot snapshot,
the group takes a batch of 8 leases for the task instead. Each rollout takes
its "agent steps" (each an exec), then the daemon grades the quickstart's
solution for the task: the reward a trainer would use.

Infrastructure failures — an error of the :class:`sandfleet.InfraError`
family, or a grade with ``infra`` set — mask the rollout: it is counted
apart and left out of the rewards, never scored as a zero.

    sandfleet serve fleet.toml &      # the quickstart's, with room for 9 sandboxes a group
    python clients/python/examples/rollouts.py --rollouts 256

A group holds 9 sandboxes at once (its setup and 8 forks): more than
``examples/quickstart.toml`` holds (4 per core), so serve a copy with
``max_sandboxes = 300`` under ``[clusters.local]``; ``--groups-at-once``
bounds how many groups hold theirs at a time. The summary is one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sandfleet

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart"
GROUP_SIZE = 8


@dataclass
class Outcome:
    """One rollout: its task, its grade's status and reward, or masked."""

    task: str
    status: str
    reward: float | None
    masked: str | None = None


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def agent_steps(lease: sandfleet.Lease) -> None:
    """What a policy would do between model calls: look around, keep notes.
    Every step is an exec; its exit code is the agent's business."""
    listing = await lease.exec("git ls-files | head -20")
    await lease.exec(["sh", "-c", 'printf "%s\\n" "$NOTES" > /tmp/agent-notes'], env={"NOTES": listing.stdout})
    await lease.exec("wc -l < /tmp/agent-notes")


async def rollout(lease: sandfleet.Lease, row: dict[str, Any], solution: str | None) -> Outcome:
    try:
        await agent_steps(lease)
        grade = await lease.evaluate(solution, task=row)
    except sandfleet.InfraError as error:
        return Outcome(row["id"], "infra_error", None, masked=error.kind)
    if grade.infra:
        return Outcome(row["id"], grade.status, None, masked=grade.infra_failure or "infra_error")
    return Outcome(row["id"], grade.status, grade.reward or 0.0)


async def group(client: sandfleet.AsyncClient, row: dict[str, Any], solution: str | None) -> tuple[list[Outcome], bool]:
    """A group of rollouts of one task, forked from one setup where the
    backend can; whether it was forked."""
    try:
        async with client.lease(task=row) as setup:
            try:
                async with setup.snapshot() as snapshot, snapshot.fork(GROUP_SIZE) as forks:
                    return list(await asyncio.gather(*(rollout(fork, row, solution) for fork in forks))), True
            except sandfleet.InfraError as error:
                if error.status != 501:  # 501: this backend cannot snapshot
                    raise
        async with client.leases(GROUP_SIZE, task=row) as leases:
            return list(await asyncio.gather(*(rollout(lease, row, solution) for lease in leases))), False
    except sandfleet.InfraError as error:
        return [Outcome(row["id"], "infra_error", None, masked=error.kind)] * GROUP_SIZE, False


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SANDFLEET_URL", "http://127.0.0.1:7878"))
    parser.add_argument("--rollouts", type=int, default=256, help="a multiple of 8")
    parser.add_argument("--groups-at-once", type=int, default=None, help="default: every group at once")
    parser.add_argument("--dataset", type=Path, default=QUICKSTART / "tasks.jsonl")
    parser.add_argument("--solutions", type=Path, default=QUICKSTART / "solutions.jsonl")
    args = parser.parse_args()

    rows = load(args.dataset)
    solutions = {row["id"]: row.get("solution") for row in load(args.solutions)}
    groups = args.rollouts // GROUP_SIZE
    room = asyncio.Semaphore(args.groups_at_once or groups)

    async def bounded(row: dict[str, Any]) -> tuple[list[Outcome], bool]:
        async with room:
            return await group(client, row, solutions.get(row["id"]))

    started = time.monotonic()
    async with sandfleet.AsyncClient(args.url, token=os.environ.get("SANDFLEET_TOKEN")) as client:
        results = await asyncio.gather(*(bounded(rows[i % len(rows)]) for i in range(groups)))
    outcomes = [outcome for group_outcomes, _ in results for outcome in group_outcomes]
    scored = [outcome.reward for outcome in outcomes if outcome.masked is None and outcome.reward is not None]
    by_task: dict[str, set[tuple[str, float | None]]] = defaultdict(set)
    for outcome in outcomes:
        by_task[outcome.task].add((outcome.status, outcome.reward))
    print(
        json.dumps(
            {
                "rollouts": len(outcomes),
                "groups": groups,
                "forked_groups": sum(forked for _, forked in results),
                "scored": len(scored),
                "masked": len(outcomes) - len(scored),
                "masked_by_kind": dict(Counter(o.masked for o in outcomes if o.masked is not None)),
                "mean_reward": sum(scored) / len(scored) if scored else None,
                "wall_s": round(time.monotonic() - started, 2),
                "by_task": {task: sorted(found, key=str) for task, found in sorted(by_task.items())},
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
