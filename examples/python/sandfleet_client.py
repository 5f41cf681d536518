"""A small client for `sandfleet serve`, using only the standard library.

    from sandfleet_client import Client

    client = Client("http://127.0.0.1:7878", token=os.environ.get("SANDFLEET_TOKEN"))
    with client.lease(image="calc") as lease:          # released on exit, and only this lease
        print(lease.exec(["python3", "-c", "print(6 * 7)"]).stdout)
        lease.write("/workspace/notes.txt", b"hello")
        grade = lease.evaluate(task=row, solution=patch)
        snapshot = lease.snapshot()                    # its files now
        forks = snapshot.fork(8)                       # 8 leases starting from them, all or none
        lease.restore(snapshot)                        # back to them, in place

For asyncio code, `AsyncClient` runs the same calls on a thread pool sized
for the rollouts you run at once, so a slow sandbox never blocks the event
loop:

    async with AsyncClient(url, max_concurrency=64).lease(image="calc") as lease:
        result = await lease.exec("pytest -q")
"""

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


class SandfleetError(Exception):
    """An error answer: `status`, `kind` (stable) and `message`."""

    def __init__(self, status, kind, message):
        super().__init__(f"{status} {kind}: {message}")
        self.status, self.kind, self.message = status, kind, message


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_ms: int


class Client:
    """Blocking calls to the daemon. Thread-safe: every call opens its own connection."""

    def __init__(self, url="http://127.0.0.1:7878", token=None, timeout=600.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method, path, body=None, raw=None, headers=None, query=None):
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = raw
        all_headers = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
                if response.headers.get_content_type() == "application/json":
                    return json.loads(payload) if payload else None
                return payload
        except urllib.error.HTTPError as error:
            payload = error.read()
            try:
                detail = json.loads(payload)["error"]
                raise SandfleetError(error.code, detail["kind"], detail["message"]) from None
            except (ValueError, KeyError, TypeError):
                raise SandfleetError(error.code, "http", payload.decode(errors="replace")) from None

    def acquire(self, image=None, task=None, labels=None, run_id=None, ttl_s=None):
        """A new lease: a sandbox of `image`, or one for the dataset row `task`."""
        body = {k: v for k, v in dict(image=image, task=task, labels=labels, run_id=run_id, ttl_s=ttl_s).items() if v is not None}
        return Lease(self, self.request("POST", "/v1/leases", body))

    def acquire_many(self, requests):
        """Several leases at once, all or none (`requests`: dicts as for `acquire`)."""
        answer = self.request("POST", "/v1/leases:batch", {"leases": list(requests)})
        return [Lease(self, info) for info in answer["leases"]]

    def lease(self, **kwargs):
        """A lease to use with `with`: released when the block ends, however it ends."""
        return _Scoped(self, kwargs)

    def warm(self, images=None, tasks=None):
        return self.request("POST", "/v1/pools", {"images": images or [], "tasks": tasks or []})


class _Scoped:
    def __init__(self, client, kwargs):
        self.client, self.kwargs, self.lease = client, kwargs, None

    def __enter__(self):
        self.lease = self.client.acquire(**self.kwargs)
        return self.lease

    def __exit__(self, *exc):
        self.lease.release()
        return False


class Lease:
    """One sandbox. `release()` gives back this lease and nothing else."""

    def __init__(self, client, info):
        self.client, self.info = client, info
        self.id = info["id"]

    def exec(self, command, timeout_s=None, env=None, workdir=None, stdin=None, idempotency_key=None):
        """Runs `command` (a list: argv; a string: a shell command line). Retries of a
        dropped connection reuse one idempotency key, so the command runs once."""
        body = {"argv": command} if isinstance(command, list) else {"command": command}
        for key, value in dict(timeout_s=timeout_s, env=env, workdir=workdir, stdin=stdin).items():
            if value is not None:
                body[key] = value
        key = idempotency_key or str(uuid.uuid4())
        for attempt in range(3):
            try:
                answer = self.client.request("POST", f"/v1/leases/{self.id}/exec", body, headers={"Idempotency-Key": key})
                return ExecResult(**{k: answer[k] for k in ExecResult.__dataclass_fields__})
            except (ConnectionError, TimeoutError, urllib.error.URLError):
                if attempt == 2:
                    raise

    def stream(self, command, timeout_s=None):
        """Yields ("stdout" | "stderr", text) as the command prints, then ("exit", result dict)."""
        body = {"argv": command} if isinstance(command, list) else {"command": command}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        headers = {"Accept": "application/x-ndjson", "Content-Type": "application/json"}
        if self.client.token:
            headers["Authorization"] = f"Bearer {self.client.token}"
        request = urllib.request.Request(
            f"{self.client.url}/v1/leases/{self.id}/exec", data=json.dumps(body).encode(), method="POST", headers=headers
        )
        with urllib.request.urlopen(request, timeout=self.client.timeout) as response:
            for line in response:
                event = json.loads(line)
                if event["event"] == "output":
                    yield event["stream"], event["data"]
                else:
                    yield event["event"], event

    def write(self, path, data, mode="644"):
        data = data.encode() if isinstance(data, str) else data
        self.client.request("PUT", f"/v1/leases/{self.id}/files", raw=data, query={"path": path, "mode": mode})

    def read(self, path):
        return self.client.request("GET", f"/v1/leases/{self.id}/files", query={"path": path})

    def evaluate(self, task=None, solution=None):
        """The adapter's grade: {"status", "grade": {"status", "reward", "tests", ...}, ...}."""
        body = {k: v for k, v in dict(task=task, solution=solution).items() if v is not None}
        return self.client.request("POST", f"/v1/leases/{self.id}/evaluate", body)

    def recycle(self):
        answer = self.client.request("POST", f"/v1/leases/{self.id}/recycle", {})
        self.info = answer["lease"]
        return answer["reset"]

    def renew(self, ttl_s=None):
        self.info = self.client.request("POST", f"/v1/leases/{self.id}/renew", {"ttl_s": ttl_s} if ttl_s else {})

    def snapshot(self, ttl_s=None):
        """The sandbox's files as they are now (not its processes); the lease serves on."""
        body = {"ttl_s": ttl_s} if ttl_s else {}
        return Snapshot(self.client, self.client.request("POST", f"/v1/leases/{self.id}/snapshots", body))

    def restore(self, snapshot):
        """Puts the sandbox back to `snapshot` (a Snapshot or its id) in place: every process
        ended, every file written since gone."""
        snapshot_id = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        self.info = self.client.request("POST", f"/v1/leases/{self.id}/restore", {"snapshot": snapshot_id})

    def release(self):
        try:
            self.client.request("DELETE", f"/v1/leases/{self.id}")
        except SandfleetError as error:
            if error.status != 404:  # already released or expired
                raise


class Snapshot:
    """A lease's files when it was taken: `fork(n)` new leases from them, or restore a lease to them."""

    def __init__(self, client, info):
        self.client, self.info = client, info
        self.id = info["id"]

    def fork(self, n, labels=None, run_id=None, ttl_s=None):
        """`n` new leases whose sandboxes start with the snapshot's files, all or none."""
        body = {k: v for k, v in dict(count=n, labels=labels, run_id=run_id, ttl_s=ttl_s).items() if v is not None}
        answer = self.client.request("POST", f"/v1/snapshots/{self.id}/leases", body)
        return [Lease(self.client, info) for info in answer["leases"]]

    def delete(self):
        try:
            self.client.request("DELETE", f"/v1/snapshots/{self.id}")
        except SandfleetError as error:
            if error.status != 404:  # already deleted or expired
                raise


class AsyncClient:
    """`Client` for asyncio: each call runs on a thread pool of `max_concurrency` threads."""

    def __init__(self, url="http://127.0.0.1:7878", token=None, max_concurrency=64, timeout=600.0):
        self.sync = Client(url, token, timeout)
        self.pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="sandfleet")

    async def call(self, function, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: function(*args, **kwargs))

    async def acquire(self, **kwargs):
        return AsyncLease(self, await self.call(self.sync.acquire, **kwargs))

    def lease(self, **kwargs):
        return _AsyncScoped(self, kwargs)

    def close(self):
        self.pool.shutdown(wait=True)


class _AsyncScoped:
    def __init__(self, client, kwargs):
        self.client, self.kwargs, self.lease = client, kwargs, None

    async def __aenter__(self):
        self.lease = await self.client.acquire(**self.kwargs)
        return self.lease

    async def __aexit__(self, *exc):
        await self.lease.release()
        return False


class AsyncLease:
    def __init__(self, client, lease):
        self.client, self.lease, self.id = client, lease, lease.id

    async def exec(self, command, **kwargs):
        return await self.client.call(self.lease.exec, command, **kwargs)

    async def evaluate(self, **kwargs):
        return await self.client.call(self.lease.evaluate, **kwargs)

    async def write(self, path, data, mode="644"):
        return await self.client.call(self.lease.write, path, data, mode)

    async def read(self, path):
        return await self.client.call(self.lease.read, path)

    async def recycle(self):
        return await self.client.call(self.lease.recycle)

    async def release(self):
        return await self.client.call(self.lease.release)

    async def snapshot(self, ttl_s=None):
        return AsyncSnapshot(self.client, await self.client.call(self.lease.snapshot, ttl_s))

    async def restore(self, snapshot):
        snapshot = snapshot.snapshot if isinstance(snapshot, AsyncSnapshot) else snapshot
        return await self.client.call(self.lease.restore, snapshot)


class AsyncSnapshot:
    def __init__(self, client, snapshot):
        self.client, self.snapshot, self.id = client, snapshot, snapshot.id

    async def fork(self, n, **kwargs):
        leases = await self.client.call(self.snapshot.fork, n, **kwargs)
        return [AsyncLease(self.client, lease) for lease in leases]

    async def delete(self):
        return await self.client.call(self.snapshot.delete)
