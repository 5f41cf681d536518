"""The SkyRL-Gym adapter, driven as SkyRL's generator drives an
environment: made by ``skyrl_gym.make``, ``init``, ``step`` until done,
``close``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

import sandfleet
from conftest import Daemon, rows, solutions

skyrl_gym = pytest.importorskip("skyrl_gym")
import sandfleet.skyrl  # noqa: E402  (needs skyrl_gym)


@pytest.fixture
def shared(daemon: Daemon) -> Iterator[sandfleet.Client]:
    with sandfleet.Client(daemon.url, token=daemon.token) as client:
        yield client


def make(daemon: Daemon, client: sandfleet.Client, run_id: str, **extras: object) -> sandfleet.skyrl.SandfleetEnv:
    sandfleet.skyrl.register()
    env = skyrl_gym.make(
        "sandfleet", env_config={"url": daemon.url, "token": daemon.token, "run_id": run_id}, extras=extras, client=client
    )
    assert isinstance(env, sandfleet.skyrl.SandfleetEnv)
    return env


def test_an_episode_runs_commands_then_is_graded_and_leaves_no_lease(daemon: Daemon, shared: sandfleet.Client) -> None:
    mine = f"py-skyrl-{uuid.uuid4().hex[:8]}"
    env = make(daemon, shared, mine, task=rows()["calc-sub"], max_turns=4)
    prompt = [{"role": "user", "content": "Fix calc's subtraction."}]
    assert env.init(prompt)[0] == prompt
    assert len(shared.list_leases(mine)) == 1

    looked = env.step("Let me look.\n<bash>python3 -c 'print(6 * 7)'; exit 3</bash>")
    assert (looked["done"], looked["reward"], looked["metadata"]["exit_code"]) == (False, 0.0, 3)
    assert "exit code 3" in looked["observations"][0]["content"] and "42" in looked["observations"][0]["content"]

    answered = env.step(f"Here it is.\n<solution>\n{solutions()['calc-sub']}</solution>")
    assert (answered["done"], answered["reward"], answered["metadata"]["status"]) == (True, 1.0, "ok")
    assert answered["metadata"]["tests"] and set(answered["metadata"]["tests"].values()) == {"passed"}
    assert env.get_metrics() == {"turns": 2, "masked": 0.0, "reward": 1.0}
    env.close()
    assert shared.list_leases(mine) == []


def test_running_out_of_turns_grades_the_sandbox_as_it_is(daemon: Daemon, shared: sandfleet.Client) -> None:
    env = make(daemon, shared, f"py-skyrl-{uuid.uuid4().hex[:8]}", task=rows()["calc-sub"], max_turns=1)
    env.init([])
    last = env.step("<bash>true</bash>")
    assert (last["done"], last["reward"], last["metadata"]["status"], last["metadata"]["masked"]) == (True, 0.0, "failed", None)
    env.close()


def test_an_infrastructure_failure_masks_the_episode_instead_of_scoring_it(daemon: Daemon, shared: sandfleet.Client) -> None:
    mine = f"py-skyrl-{uuid.uuid4().hex[:8]}"
    env = make(daemon, shared, mine, image="calc")
    env.init([])
    assert env.lease is not None
    # The sandbox goes away under the episode (here: someone releases it).
    httpx.delete(f"{daemon.url}/v1/leases/{env.lease.id}", headers={"Authorization": f"Bearer {daemon.token}"})
    failed = env.step("<bash>ls</bash>")
    assert (failed["done"], failed["reward"], failed["metadata"]["status"]) == (True, 0.0, "infra_error")
    assert failed["metadata"]["masked"]
    assert env.get_metrics()["masked"] == 1.0
    env.close()
    assert shared.list_leases(mine) == []
