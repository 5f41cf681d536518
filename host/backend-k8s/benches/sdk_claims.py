"""Claims through the official Python SDK (k8s-agent-sandbox), as the
driver's bench measures its own: create -> Ready -> delete, `total` times at
`concurrency`, from the warm pool `pool`. Prints one JSON line.

Run by `cargo bench -p sandfleet-backend-k8s --bench k8s` when
SANDFLEET_BENCH_SDK_PYTHON names a Python with `k8s-agent-sandbox[async]`.
"""

import asyncio
import json
import sys
import time
import uuid

from kubernetes_asyncio import client, config
from k8s_agent_sandbox.async_k8s_helper import AsyncK8sHelper


async def main(kubeconfig, context, namespace, pool, concurrency, total):
    await config.load_kube_config(config_file=kubeconfig, context=context)
    api = client.ApiClient()
    helper = AsyncK8sHelper(api)
    gate = asyncio.Semaphore(concurrency)
    latencies = []

    async def one():
        async with gate:
            name = f"sdk-{uuid.uuid4().hex[:16]}"
            begun = time.perf_counter()
            made = await helper.create_sandbox_claim(name, pool, namespace)
            await helper.wait_for_claim_ready(
                name,
                namespace,
                300,
                resource_version=made["metadata"]["resourceVersion"],
                initial_claim=made,
            )
            latencies.append(time.perf_counter() - begun)
            await helper.delete_sandbox_claim(name, namespace)

    cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(total)))
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    await api.close()
    print(json.dumps({"elapsed": elapsed, "cpu": cpu, "latencies": latencies}))


if __name__ == "__main__":
    kubeconfig, context, namespace, pool, concurrency, total = sys.argv[1:7]
    asyncio.run(main(kubeconfig, context, namespace, pool, int(concurrency), int(total)))
