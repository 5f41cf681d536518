"""64 concurrent rollouts against `sandfleet serve examples/quickstart.toml`.

Each rollout takes a task of the quickstart's dataset, gets a sandbox for it
(its own lease, released when the rollout ends, whatever happens), takes two
"agent steps" in it, and asks the daemon to grade the quickstart's solution:
the reward an RL trainer would use.

    sandfleet serve examples/quickstart.toml &
    python3 examples/python/rollouts.py --rollouts 64
"""

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sandfleet_client import AsyncClient  # noqa: E402

HERE = Path(__file__).resolve().parent.parent / "quickstart"


def load(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


async def rollout(client, row, solution):
    async with client.lease(task=row) as lease:
        # The agent looks around and edits a scratch file: state that the
        # lease keeps between steps.
        listing = await lease.exec("ls")
        await lease.write("/tmp/agent-notes.txt", f"files: {listing.stdout.split()}")
        notes = await lease.read("/tmp/agent-notes.txt")
        assert notes.startswith(b"files:"), notes
        graded = await lease.evaluate(solution=solution)
        grade = graded.get("grade") or {}
        return row["id"], graded["status"], grade.get("reward") or 0.0


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SANDFLEET_URL", "http://127.0.0.1:7878"))
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--dataset", default=HERE / "tasks.jsonl")
    parser.add_argument("--solutions", default=HERE / "solutions.jsonl")
    args = parser.parse_args()
    rows = load(args.dataset)
    solutions = {s["id"]: s.get("solution") for s in load(args.solutions)}
    client = AsyncClient(args.url, token=os.environ.get("SANDFLEET_TOKEN"), max_concurrency=args.rollouts)
    started = time.monotonic()
    try:
        picks = [rows[i % len(rows)] for i in range(args.rollouts)]
        results = await asyncio.gather(*(rollout(client, row, solutions.get(row["id"])) for row in picks))
    finally:
        client.close()
    wall = time.monotonic() - started
    by_task = {}
    for task, status, reward in results:
        by_task.setdefault(task, set()).add((status, reward))
    summary = {
        "rollouts": len(results),
        "mean_reward": sum(r for _, _, r in results) / len(results),
        "wall_s": round(wall, 2),
        "by_task": {task: sorted(outcomes) for task, outcomes in sorted(by_task.items())},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
