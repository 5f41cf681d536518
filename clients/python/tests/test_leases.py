"""Leases, batches, streaming, files, grading, snapshots, forks and shared
sessions against the daemon, through the async client and the sync one."""

from __future__ import annotations

import tomllib
import uuid
from pathlib import Path

import httpx
import pytest

import sandfleet
from conftest import Daemon, rows, solutions


def run_id() -> str:
    """A run id of one test's own, so its listing sees only its leases."""
    return f"py-{uuid.uuid4().hex[:12]}"


async def test_the_version_tracks_the_daemons_api_version(daemon: Daemon) -> None:
    async with httpx.AsyncClient() as http:
        document = (await http.get(f"{daemon.url}/v1/openapi.json", headers={"Authorization": f"Bearer {daemon.token}"})).json()
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert document["info"]["version"] == sandfleet.__version__ == project["version"]


async def test_a_lease_lives_for_its_block_and_releases_only_itself(client: sandfleet.AsyncClient) -> None:
    mine = run_id()
    other = await client.acquire(image="calc", run_id=mine)
    async with client.lease(image="calc", run_id=mine) as lease:
        assert {info.id for info in await client.list_leases(mine)} == {lease.id, other.id}
        result = await lease.exec(["echo", "hi"])
        assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (0, "hi\n", "", False)
    assert [info.id for info in await client.list_leases(mine)] == [other.id]
    with pytest.raises(RuntimeError):
        async with client.lease(image="calc", run_id=mine) as failing:
            raise RuntimeError("the rollout crashed")
    assert [info.id for info in await client.list_leases(mine)] == [other.id]
    await other.release()
    await other.release()  # twice is no error
    assert await client.list_leases(mine) == []
    assert failing.id != other.id


async def test_exec_results_files_and_timeouts(client: sandfleet.AsyncClient) -> None:
    async with client.lease(image="calc") as lease:
        result = await lease.exec("echo out; echo err >&2; exit 4")
        assert (result.exit_code, result.stdout, result.stderr) == (4, "out\n", "err\n")
        assert (await lease.exec("cat", stdin="fed")).stdout == "fed"
        assert (await lease.exec("echo $GREETING", env={"GREETING": "hello"})).stdout == "hello\n"
        slow = await lease.exec("sleep 5", timeout_s=0.5)
        assert slow.timed_out
        await lease.write("/tmp/blob", bytes(range(256)))
        assert await lease.read("/tmp/blob") == bytes(range(256))
        await lease.write("/tmp/script.sh", "echo from a file\n", mode=0o755)
        assert (await lease.exec("/tmp/script.sh")).stdout == "from a file\n"


async def test_streamed_output_comes_as_printed_then_the_result(client: sandfleet.AsyncClient) -> None:
    async with client.lease(image="calc") as lease:
        pieces = []
        async with lease.stream("echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 3") as output:
            async for piece in output:
                pieces.append(piece)
        assert [(p.stream, p.data) for p in pieces] == [("stdout", "one\n"), ("stderr", "two\n"), ("stdout", "three\n")]
        assert (output.result.exit_code, output.result.stdout, output.result.stderr) == (3, "one\nthree\n", "two\n")


async def test_evaluate_grades_with_tests_and_recycle_resets(client: sandfleet.AsyncClient) -> None:
    async with client.lease(task=rows()["calc-sub"]) as lease:
        grade = await lease.evaluate(solutions()["calc-sub"])
        assert (grade.status, grade.reward, grade.infra) == ("ok", 1.0, False)
        assert grade.tests and all(test.status == "passed" for test in grade.tests)
        assert await lease.recycle() == "clean"
        unsolved = await lease.evaluate()
        assert (unsolved.status, unsolved.infra) == ("failed", False)
    async with client.lease(image="calc") as lease:
        graded = await lease.evaluate(solutions()["calc-sub"], task=rows()["calc-sub"])
        assert graded.status == "ok"


async def test_a_batch_is_all_or_nothing(client: sandfleet.AsyncClient) -> None:
    mine = run_id()
    async with client.leases(3, image="textkit", run_id=mine) as group:
        assert len(group) == 3 and len({lease.id for lease in group}) == 3
        outputs = [(await lease.exec("echo $((6 * 7))")).stdout for lease in group]
        assert outputs == ["42\n"] * 3
    assert await client.list_leases(mine) == []
    tasks = [rows()["calc-add"], rows()["shell-trim"], {"id": "bogus", "image": "no-such-image", "test": "true"}]
    with pytest.raises(sandfleet.InvalidRequest) as refused:
        await client.leases(tasks=tasks, run_id=mine)
    assert "leases[2] of 3" in refused.value.message
    assert await client.list_leases(mine) == []


async def test_snapshots_fork_and_restore(client: sandfleet.AsyncClient) -> None:
    mine = run_id()
    async with client.lease(image="calc", run_id=mine) as lease:
        await lease.exec("echo before > /workspace/marker")
        async with lease.snapshot() as snapshot:
            await lease.exec("echo after > /workspace/later")
            async with snapshot.fork(2) as forks:
                assert [fork.info.run_id for fork in forks] == [mine, mine]
                for fork in forks:
                    seen = await fork.exec("cat /workspace/marker; test -e /workspace/later && echo later")
                    assert seen.stdout == "before\n"
            await lease.restore(snapshot)
            assert (await lease.exec("test -e /workspace/later")).exit_code == 1
        with pytest.raises(sandfleet.NotFound):
            await snapshot.fork(1)
    assert await client.list_leases(mine) == []


async def test_shared_sessions_share_a_sandbox_and_the_pool_says_when_full(client: sandfleet.AsyncClient) -> None:
    first = await _open_when_healthy(client)
    async with first, client.session("tools") as second:
        assert first.info.sandbox == second.info.sandbox
        await first.exec("echo shared > /tmp/shared-note")
        assert (await second.exec("cat /tmp/shared-note")).stdout == "shared\n"
        with pytest.raises(sandfleet.PoolFull) as full:
            await client.session("tools")
        assert isinstance(full.value, sandfleet.Throttled) and isinstance(full.value, sandfleet.InfraError)
        async with second.stream(["echo", "streamed"]) as output:
            assert [piece.data async for piece in output] == ["streamed\n"]


async def _open_when_healthy(client: sandfleet.AsyncClient) -> sandfleet.Session:
    """A session once the pool has filled (it fills as the daemon starts)."""
    import asyncio

    for _ in range(300):
        try:
            return await client.session("tools")
        except sandfleet.Unavailable:
            await asyncio.sleep(0.1)
    raise AssertionError("the shared pool never became healthy")


async def test_errors_come_typed_by_what_to_do_about_them(client: sandfleet.AsyncClient, daemon: Daemon) -> None:
    with pytest.raises(sandfleet.InvalidRequest) as invalid:
        await client.acquire(image="no-such-image")
    assert (invalid.value.status, invalid.value.kind) == (400, "invalid_request")
    assert "no-such-image" in invalid.value.message
    assert not isinstance(invalid.value, sandfleet.InfraError)

    with pytest.raises(sandfleet.NotFound):
        await client.session("no-such-pool")

    with pytest.raises(sandfleet.Unavailable) as unavailable:
        await client.leases(2000, image="calc")
    assert isinstance(unavailable.value, sandfleet.InfraError) and unavailable.value.status == 503

    async with sandfleet.AsyncClient(daemon.url) as anonymous:
        with pytest.raises(sandfleet.Unauthorized):
            await anonymous.list_leases()

    async with client.lease(image="calc") as lease:
        key = uuid.uuid4().hex
        await lease.exec("true", idempotency_key=key)
        with pytest.raises(sandfleet.Conflict):
            await lease.exec("false", idempotency_key=key)
        # Someone else releases the lease: the daemon no longer knows it.
        async with httpx.AsyncClient() as http:
            await http.delete(f"{daemon.url}/v1/leases/{lease.id}", headers={"Authorization": f"Bearer {daemon.token}"})
        with pytest.raises(sandfleet.LeaseExpired) as expired:
            await lease.exec("true")
        assert isinstance(expired.value, sandfleet.InfraError)
    with pytest.raises(sandfleet.NotFound):  # released by this client: the caller's mistake
        await lease.exec("true")


def test_the_sync_client_has_the_same_shape(daemon: Daemon) -> None:
    mine = run_id()
    with sandfleet.Client(daemon.url, token=daemon.token, run_id=mine) as client:
        with client.lease(task=rows()["calc-sub"]) as lease:
            assert lease.exec(["python3", "-c", "print(6 * 7)"]).stdout == "42\n"
            lease.write("/workspace/note", b"kept")
            assert lease.read("/workspace/note") == b"kept"
            with lease.stream("echo a; echo b") as output:
                assert "".join(piece.data for piece in output) == "a\nb\n"
            assert output.result.exit_code == 0
            assert lease.evaluate(solutions()["calc-sub"]).reward == 1.0
            with lease.snapshot() as snapshot, snapshot.fork(2) as forks:
                assert [fork.exec("test -e /workspace/note && echo kept").stdout for fork in forks] == ["kept\n"] * 2
        with client.leases(2, image="calc"):
            assert len(client.list_leases(mine)) == 2
        assert client.list_leases(mine) == []
        held = client.lease(image="calc")
        assert [info.id for info in client.list_leases(mine)] == [held.id]
    with sandfleet.Client(daemon.url, token=daemon.token) as check:
        assert check.list_leases(mine) == []  # the first client's close released what it held


async def test_an_idle_lease_is_renewed_for_its_holder(client: sandfleet.AsyncClient) -> None:
    import asyncio

    async with client.lease(image="calc", ttl_s=3) as lease:
        first = lease.info.expires_at
        await asyncio.sleep(5)  # idle past its 3 s of idle time: the waiting is what is tested
        seen = {info.id: info for info in await client.list_leases(lease.info.run_id)}
        assert lease.id in seen
        assert (seen[lease.id].expires_at - first).total_seconds() >= 2  # renewed since, more than once
        assert (await lease.exec("true")).exit_code == 0


def test_a_throttled_answer_carries_its_retry_after() -> None:
    error = sandfleet.errors.from_response(429, {"error": {"kind": "throttled", "message": "slow down"}}, "7")
    assert isinstance(error, sandfleet.Throttled) and isinstance(error, sandfleet.InfraError)
    assert (error.retry_after, error.status, error.kind) == (7.0, 429, "throttled")
    unknown = sandfleet.errors.from_response(503, {"error": {"kind": "something_new", "message": "x"}})
    assert isinstance(unknown, sandfleet.InfraError) and not isinstance(unknown, sandfleet.InvalidRequest)
