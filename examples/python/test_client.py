"""The Python client against a running daemon (SANDFLEET_URL, SANDFLEET_TOKEN),
serving a fleet file with the quickstart's images and the generic adapter.

    python3 examples/python/test_client.py
"""

import asyncio
import json
import os
import sys
import unittest
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sandfleet_client import AsyncClient, Client, SandfleetError  # noqa: E402

URL = os.environ.get("SANDFLEET_URL", "http://127.0.0.1:7878")
TOKEN = os.environ.get("SANDFLEET_TOKEN")
QUICKSTART = Path(__file__).resolve().parent.parent / "quickstart"


def row(task_id):
    for line in (QUICKSTART / "tasks.jsonl").read_text().splitlines():
        if line.strip() and json.loads(line)["id"] == task_id:
            return json.loads(line)
    raise KeyError(task_id)


def solution(task_id):
    for line in (QUICKSTART / "solutions.jsonl").read_text().splitlines():
        if line.strip() and json.loads(line)["id"] == task_id:
            return json.loads(line)["solution"]
    return None


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.client = Client(URL, token=TOKEN)

    def live(self, lease_id):
        try:
            self.client.request("GET", f"/v1/leases/{lease_id}")
            return True
        except SandfleetError as error:
            self.assertEqual(error.status, 404)
            return False

    def test_a_lease_as_a_context_manager_releases_only_itself(self):
        other = self.client.acquire(image="calc", run_id="python-test")
        with self.client.lease(image="calc", run_id="python-test") as lease:
            self.assertTrue(self.live(lease.id))
            self.assertEqual(lease.exec(["echo", "hi"]).stdout, "hi\n")
        self.assertFalse(self.live(lease.id))
        self.assertTrue(self.live(other.id))
        with self.assertRaises(RuntimeError):
            with self.client.lease(image="calc") as failing:
                raise RuntimeError("the rollout crashed")
        self.assertFalse(self.live(failing.id))
        self.assertTrue(self.live(other.id))
        other.release()

    def test_exec_stream_files_evaluate_recycle(self):
        with self.client.lease(task=row("calc-sub")) as lease:
            result = lease.exec("echo out; echo err >&2; exit 4")
            self.assertEqual((result.exit_code, result.stdout, result.stderr), (4, "out\n", "err\n"))
            events = list(lease.stream(["sh", "-c", "echo one; echo two"]))
            self.assertEqual("".join(text for kind, text in events if kind == "stdout"), "one\ntwo\n")
            self.assertEqual(events[-1][0], "exit")
            lease.write("/tmp/blob", bytes(range(256)))
            self.assertEqual(lease.read("/tmp/blob"), bytes(range(256)))
            graded = lease.evaluate(solution=solution("calc-sub"))
            self.assertEqual((graded["status"], graded["grade"]["reward"]), ("ok", 1.0))
            self.assertEqual(lease.recycle(), "clean")
            unsolved = lease.evaluate()
            self.assertEqual(unsolved["status"], "failed")

    def test_a_retry_with_one_key_runs_once(self):
        with self.client.lease(image="calc") as lease:
            key = str(uuid.uuid4())
            for _ in range(3):
                lease.exec("echo x >> /tmp/ran; wc -l < /tmp/ran", idempotency_key=key)
            self.assertEqual(lease.exec("wc -l < /tmp/ran").stdout, "1\n")

    def test_snapshot_fork_restore(self):
        with self.client.lease(image="calc", run_id="python-test") as lease:
            lease.exec("echo before > /workspace/marker")
            snapshot = lease.snapshot()
            lease.exec("echo after > /workspace/later")
            forks = snapshot.fork(2)
            try:
                self.assertEqual([fork.info["run_id"] for fork in forks], ["python-test"] * 2)
                for fork in forks:
                    seen = fork.exec("cat /workspace/marker; test -e /workspace/later && echo later")
                    self.assertEqual(seen.stdout, "before\n")
            finally:
                for fork in forks:
                    fork.release()
            lease.restore(snapshot)
            self.assertEqual(lease.exec("test -e /workspace/later").exit_code, 1)
            snapshot.delete()
            with self.assertRaises(SandfleetError) as caught:
                snapshot.fork(1)
            self.assertEqual((caught.exception.status, caught.exception.kind), (404, "not_found"))
            snapshot.delete()

    def test_async_snapshot_fork_restore(self):
        async def flow():
            client = AsyncClient(URL, token=TOKEN, max_concurrency=4)
            try:
                async with client.lease(image="calc") as lease:
                    await lease.exec("echo one > /workspace/marker")
                    snapshot = await lease.snapshot()
                    await lease.exec("echo two > /workspace/marker")
                    forks = await snapshot.fork(2)
                    seen = [(await fork.exec("cat /workspace/marker")).stdout for fork in forks]
                    for fork in forks:
                        await fork.release()
                    await lease.restore(snapshot)
                    restored = (await lease.exec("cat /workspace/marker")).stdout
                    await snapshot.delete()
                    return seen, restored
            finally:
                client.close()

        self.assertEqual(asyncio.run(flow()), (["one\n", "one\n"], "one\n"))

    def test_errors_carry_kind_and_message(self):
        with self.assertRaises(SandfleetError) as caught:
            self.client.acquire(image="no-such-image")
        self.assertEqual((caught.exception.status, caught.exception.kind), (400, "invalid_request"))
        self.assertIn("no-such-image", caught.exception.message)

    def test_async_rollouts_run_at_once(self):
        async def rollouts():
            client = AsyncClient(URL, token=TOKEN, max_concurrency=8)
            try:
                async def one(i):
                    async with client.lease(image="calc") as lease:
                        return (await lease.exec(f"echo {i}")).stdout
                return await asyncio.gather(*(one(i) for i in range(8)))
            finally:
                client.close()

        self.assertEqual(asyncio.run(rollouts()), [f"{i}\n" for i in range(8)])


if __name__ == "__main__":
    unittest.main()
