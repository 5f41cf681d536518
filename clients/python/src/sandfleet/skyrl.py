"""A SkyRL-Gym environment whose tool is a sandfleet sandbox.

``SandfleetEnv`` implements ``skyrl_gym.envs.base_text_env.BaseTextEnv``
(``init``, ``step``, ``close``), SkyRL's text-in, text-out interface. One
episode holds one lease, acquired for its dataset row in ``init`` and
released in ``close``:

* an action with ``<bash>COMMAND</bash>`` runs ``COMMAND`` in the sandbox
  (one exec); the observation is its exit code and output;
* an action with ``<solution>PATCH</solution>`` ends the episode: the daemon
  grades the patch with the task's tests, and the reward is the grade's;
* ``<submit/>``, or running out of turns, grades the sandbox as it is.

An infrastructure failure (an :class:`~sandfleet.InfraError`, or a grade
with ``infra`` set) ends the episode with reward 0.0 and
``metadata["masked"]`` naming it: the trainer drops the sample rather than
learn from a zero the policy did not earn.

SkyRL calls ``step`` from its own worker threads; the environment uses the
blocking :class:`sandfleet.Client`, which is safe to share between
environments and threads (pass one as ``client=`` so all of a generator's
environments share one connection pool). Needs ``pip install
'sandfleet[skyrl]'``.

::

    import skyrl_gym, sandfleet.skyrl
    sandfleet.skyrl.register()                      # id "sandfleet"
    env = skyrl_gym.make("sandfleet", env_config={"url": URL}, extras={"task": row, "max_turns": 8})
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from ._sync import Client, SyncLease
from .errors import InfraError

__all__ = ["SandfleetEnv", "register", "ENV_ID"]

ENV_ID = "sandfleet"
_BASH = re.compile(r"<bash>(.*?)</bash>", re.DOTALL)
_SOLUTION = re.compile(r"<solution>(.*?)</solution>", re.DOTALL)
_SUBMIT = "<submit/>"
_OUTPUT_LIMIT = 4000


def register(env_id: str = ENV_ID) -> None:
    """Registers :class:`SandfleetEnv` with SkyRL-Gym as ``env_id``."""
    import skyrl_gym

    if env_id not in skyrl_gym.registry:
        skyrl_gym.register(id=env_id, entry_point="sandfleet.skyrl:SandfleetEnv")


class SandfleetEnv(BaseTextEnv):  # type: ignore[misc]
    """A SkyRL-Gym text environment over one sandfleet lease.

    ``extras`` (a dataset row's, as SkyRL passes it): ``task``, the
    daemon's dataset row to set the sandbox up for (or ``image``),
    and ``max_turns`` (default 8). ``env_config``: ``url``, ``token``,
    ``run_id``, ``exec_timeout_s`` (default 60). ``client``: a shared
    :class:`sandfleet.Client`; without one the environment makes its own and
    closes it in ``close``.
    """

    def __init__(
        self,
        env_config: Mapping[str, Any] | None = None,
        extras: Mapping[str, Any] | None = None,
        client: Client | None = None,
    ) -> None:
        super().__init__()
        config = dict(env_config or {})
        extras = dict(extras or {})
        self.task: dict[str, Any] | None = extras.get("task")
        self.image: str | None = extras.get("image")
        if self.task is None and self.image is None:
            raise ValueError("SandfleetEnv: extras need a `task` (a dataset row) or an `image`")
        self.max_turns = int(extras.get("max_turns", 8))
        self.exec_timeout_s = float(config.get("exec_timeout_s", 60))
        self._run_id = config.get("run_id")
        self._own_client = client is None
        self.client = client or Client(config.get("url", "http://127.0.0.1:7878"), config.get("token"))
        self.lease: SyncLease | None = None
        self.chat_history: ConversationType = []
        self.outcome: dict[str, Any] = {}

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Acquires the episode's lease (the task's setup runs now)."""
        self.lease = self.client.lease(image=self.image, task=self.task, run_id=self._run_id)
        return prompt, {"lease": self.lease.id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        self.chat_history.append({"role": "assistant", "content": action})
        lease = self.lease
        if lease is None:
            raise RuntimeError("SandfleetEnv.step before init")
        try:
            solution = _SOLUTION.search(action)
            if solution is not None:
                return self._graded(lease, _patch(solution.group(1)))
            if _SUBMIT in action:
                return self._graded(lease, None)
            command = _BASH.search(action)
            if command is None:
                observation = "No command: put one in <bash>...</bash>, or answer with <solution>PATCH</solution>."
                meta: dict[str, Any] = {"tool": None}
            else:
                result = lease.exec(command.group(1).strip(), timeout_s=self.exec_timeout_s)
                observation = _describe(result.exit_code, result.stdout, result.stderr, result.timed_out)
                meta = {"tool": "bash", "exit_code": result.exit_code, "timed_out": result.timed_out}
            if self.turns >= self.max_turns:
                return self._graded(lease, None)
        except InfraError as error:
            return self._masked(error.kind, str(error))
        message = {"role": "user", "content": observation}
        self.chat_history.append(message)
        return BaseTextEnvStepOutput(observations=[message], reward=0.0, done=False, metadata=meta)

    def close(self) -> None:
        """Releases the lease (and closes the client the environment made)."""
        try:
            if self.lease is not None:
                self.lease.release()
                self.lease = None
        finally:
            if self._own_client:
                self._own_client = False
                self.client.close()

    def get_metrics(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "masked": 1.0 if self.outcome.get("masked") else 0.0,
            "reward": self.outcome.get("reward", 0.0),
        }

    def _graded(self, lease: SyncLease, solution: str | None) -> BaseTextEnvStepOutput:
        grade = lease.evaluate(solution)
        if grade.infra:
            return self._masked(grade.infra_failure or "infra_error", grade.error or grade.detail)
        reward = float(grade.reward or 0.0)
        self.outcome = {"status": grade.status, "reward": reward, "masked": None}
        meta = {
            "status": grade.status,
            "tests": {test.name: test.status for test in grade.tests},
            "masked": None,
        }
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=meta)

    def _masked(self, kind: str, why: str) -> BaseTextEnvStepOutput:
        self.outcome = {"status": "infra_error", "reward": 0.0, "masked": kind}
        meta = {"status": "infra_error", "masked": kind, "error": why}
        return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=meta)


def _patch(text: str) -> str:
    """A patch as the model wrote it between the tags: without the newline
    after the opening tag, ending in one (its last context line may be a
    lone space, so it is not stripped)."""
    text = text.removeprefix("\n")
    return text if text.endswith("\n") else text + "\n"


def _describe(exit_code: int, stdout: str, stderr: str, timed_out: bool) -> str:
    parts = [f"exit code {exit_code}" + (" (timed out)" if timed_out else "")]
    if stdout:
        parts.append("stdout:\n" + stdout[-_OUTPUT_LIMIT:])
    if stderr:
        parts.append("stderr:\n" + stderr[-_OUTPUT_LIMIT:])
    return "\n".join(parts)
