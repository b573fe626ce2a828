"""``GiveUpPenalty``: a negative reward component for ending a tool-use episode without acting."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym

from textgym.errors import SetupError
from textgym.wrappers._components import add_component, require_info_keys

__all__ = ["GiveUpPenalty"]


class GiveUpPenalty(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Subtract ``penalty`` when a tool-use episode ends, unsolved, before any write succeeded.

    With the outcome reward alone a failed attempt and a refusal both score 0, and with
    :class:`~textgym.wrappers.InvalidActionPenalty` a refusal scores more than an attempt that
    makes one malformed call: on ``textgym/EmailToolUse-v1`` (Gemma 3 270M, LoRA, issue 56)
    GRPO with that penalty taught the policy to answer "Done" without writing in 32% of
    greedy episodes. This component makes giving up cost more than trying: it is paid once,
    on the episode's last step (final answer or truncation), when the episode failed
    (``success`` false), no write succeeded (``total_writes == 0``) and the task needed one
    (``noop_task`` false: a request whose condition is false is solved by doing nothing, and
    then is a success anyway). An attempt whose writes are wrong is not charged, so within a
    GRPO group a wrong attempt ranks above a refusal and below a solve.

    The default ``penalty=0.2`` is twice the invalid-action penalty's default, so that
    one malformed call on the way to a write (-0.1) still beats a refusal (-0.2).

    Args:
        env: An env whose step info reports ``success``, ``total_writes`` and ``noop_task``
            and declares them in its ``info_keys`` (``textgym/EmailToolUse-v1``,
            ``textgym/Workplace-v1``).
        penalty: Size of the penalty, finite and >= 0.
        name: Component name. Default ``"give_up"``.

    Raises:
        SetupError: for a negative or non-finite penalty, or an env whose ``info_keys`` lack
            one of the keys above.

    Example:
        >>> import gymnasium as gym, textgym
        >>> env = GiveUpPenalty(gym.make("textgym/EmailToolUse-v1"))
        >>> _ = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step("Done.")
        >>> reward, info["reward_components"]
        (-0.2, {'outcome': 0.0, 'give_up': -0.2})
    """

    #: The step info keys this wrapper reads, which the env must declare in its ``info_keys``.
    required_info_keys: ClassVar[tuple[str, ...]] = ("success", "total_writes", "noop_task")

    def __init__(self, env: gym.Env[str, str], penalty: float = 0.2, name: str = "give_up"):
        gym.utils.RecordConstructorArgs.__init__(self, penalty=penalty, name=name)
        gym.Wrapper.__init__(self, env)
        require_info_keys(
            type(self).__name__, env, self.required_info_keys, "textgym/EmailToolUse-v1"
        )
        if not math.isfinite(penalty) or penalty < 0:  # NaN passes `< 0`: check it first
            raise SetupError(f"Expected a finite penalty >= 0, got {penalty}")
        self.penalty = float(penalty)
        self.name = name

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        gave_up = (
            (terminated or truncated)
            and not info["success"]
            and info["total_writes"] == 0
            and not info["noop_task"]
        )
        value = -self.penalty if gave_up else 0.0
        info: dict[str, Any] = add_component(info, reward, self.name, value)
        return obs, float(reward) + value, terminated, truncated, info
