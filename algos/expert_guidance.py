"""Expert-guided groups: the env's own expert plays the task of a GRPO group whose sampled
episodes all earn the same return, and its episode takes a place in the group.

A flat group has zero advantage everywhere and gives no gradient, and when the policy almost
never samples the better move no resampling makes it informative: at the tic-tac-toe
positions the league adapter misreads, a sample at T = 1 is safe 6-7% of the time, 61-65% of
those positions gave no safe move in 32 samples, and groups of 32 there stayed 50-60% flat
(docs/mastery_study.md). LUFFY (Yan et al. 2025, "Learning to Reason under Off-Policy
Guidance") mixes off-policy demonstrations into GRPO groups; here only flat groups get one.
With ``expert_guidance`` k, the expert (:meth:`textgym.TextEnv.make_expert`) plays each flat
group's task (its seed and reset options), and where it earns a higher return than the group
its episode replaces the group's last k sampled ones; the group's advantages are then taken as
for any group: the expert's episode above the group's mean, the sampled ones below.

Off-policy: the expert's tokens were not sampled by the policy. With ``num_iterations`` 1 the
update takes the learner's own log-probs as the old ones, so the importance ratio is 1 in value
and the expert's episode enters as an advantage-weighted log-likelihood term (LUFFY's off-policy
term without its policy shaping); with more iterations the old log-probs are the learner's
before the update, as for every episode. The expert's sampling log-probs do not exist and are
recorded as 0.0, so guidance is refused where the ratio would read them (rollouts sampled from
other weights: llama-server, a bfloat16 copy).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from textgym.algos.advantages import zero_variance_groups
from textgym.builder import make_expert
from textgym.policies.base import Policy
from textgym.policies.hf import HFPolicy
from textgym.rollout import Trajectory, rollout
from textgym.types import Completion

__all__ = ["ExpertGuide", "replay_tokens"]

#: One task of a step: its reset seed and options (``None``: none).
Task = tuple[int, Mapping[str, Any] | None]


@dataclass
class ExpertGuide:
    """Plays the env's expert on the tasks of a step's flat groups (:meth:`guide`).

    Attributes:
        make_env: Builds the training env (the expert plays the same env, wrappers included,
            so its return is comparable to the group's).
        expert: The env's own expert policy.
        per_group: Sampled episodes a guided group gives up to the expert's episode, k in
            ``[1, G - 1]``.
        batch_size: Most expert episodes played at once.
    """

    make_env: Callable[[], Any]
    expert: Policy
    per_group: int
    batch_size: int = 64

    @classmethod
    def for_env(
        cls,
        make_env: Callable[[], Any],
        env_kwargs: Mapping[str, Any],
        *,
        per_group: int,
        seed: int,
        batch_size: int,
    ) -> ExpertGuide:
        """The guide of the env ``make_env`` builds, with its expert seeded by ``seed``.

        Raises:
            SetupError: the env names no expert policy.
        """
        probe = make_env()
        try:
            expert = make_expert(probe.unwrapped, env_kwargs, seed=seed)
        finally:
            probe.close()
        return cls(make_env, expert, per_group, batch_size)

    def guide(
        self,
        trajectories: list[Trajectory],
        tasks: Sequence[Task],
        group_size: int,
        policy: HFPolicy,
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """Give each flat group the expert's episode where it earns more than the group.

        Args:
            trajectories: ``B = M x G`` token-level trajectories, groups of ``G`` consecutive.
            tasks: ``B`` tasks, ``tasks[i]`` the seed and options ``trajectories[i]`` was
                played with.
            group_size: ``G``.
            policy: The sampling policy, whose chat template renders the expert's episodes
                into token ids (:func:`replay_tokens`).

        Returns:
            The batch with the replacements (a new list; the input is not changed), and
            ``sampled_flat_fraction`` (share of the M groups whose sampled returns are all
            equal) and ``guided_fraction`` (share of the M groups given an expert episode).
        """
        returns = torch.tensor([t.episode_return for t in trajectories], dtype=torch.float64)
        flat = zero_variance_groups(returns, group_size).tolist()  # [M] bool
        groups = [g for g, is_flat in enumerate(flat) if is_flat]
        guided: list[Trajectory] = list(trajectories)
        if groups:
            seeds = [tasks[g * group_size][0] for g in groups]
            options = [tasks[g * group_size][1] for g in groups]
            played = rollout(
                self.make_env,
                self.expert,
                seeds,
                batch_size=self.batch_size,
                options=options,
                token_level=False,
            )
        else:
            played = []
        count = 0
        for g, episode in zip(groups, played):
            if not episode.episode_return > trajectories[g * group_size].episode_return:
                continue  # the expert did no better: the group stays as sampled
            end = (g + 1) * group_size
            replayed = replay_tokens(policy, episode)  # once; the k copies share nothing mutable
            for i in range(end - self.per_group, end):
                guided[i] = copy.deepcopy(replayed) if i > end - self.per_group else replayed
            count += 1
        m = len(flat)
        return guided, {
            "sampled_flat_fraction": len(groups) / m if m else 0.0,
            "guided_fraction": count / m if m else 0.0,
        }


def replay_tokens(policy: HFPolicy, trajectory: Trajectory) -> Trajectory:
    """A text-level trajectory (a scripted policy's) as a token-level one: the token ids the
    rollout would have recorded had ``policy`` generated the same actions.

    The prompt and continuations come from ``policy``'s chat template, as in a token-level
    rollout (:meth:`~textgym.policies.hf.HFPolicy.prompt_ids`,
    :meth:`~textgym.policies.hf.HFPolicy.continuation_ids`); each action is tokenized as an
    SFT target (``chat_tokenizer.assistant_ids``: its text, then the end-of-turn token), with
    ``loss_mask`` 1 on those ids and sampling log-probs 0.0 (there were none).

    Returns:
        A copy of ``trajectory`` with ``token_ids``, ``loss_mask`` and ``token_logprobs`` set.

    Raises:
        ValueError: the trajectory's messages are not its start plus one assistant and one
            user message per step (not a rollout's trajectory).
    """
    messages = trajectory.messages
    start = len(messages) - 2 * trajectory.num_steps
    turns = messages[start:]
    if start < 1 or any(m["role"] != r for m, r in zip(turns, ["assistant", "user"] * len(turns))):
        raise ValueError(
            f"Expected a rollout's trajectory (its start, then an assistant and a user message "
            f"per step), got {len(messages)} messages for {trajectory.num_steps} steps"
        )
    info = {"tools": trajectory.tools} if trajectory.tools else {}
    replayed = dataclasses.replace(trajectory, token_ids=[], loss_mask=[], token_logprobs=[])
    replayed.extend_tokens(policy.prompt_ids(messages[:start], info))
    for step in range(trajectory.num_steps):
        at = start + 2 * step
        action = str(messages[at]["content"])
        ids = policy.chat_tokenizer.assistant_ids(action)
        replayed.extend_tokens(ids, [0.0] * len(ids))
        if step + 1 < trajectory.num_steps:
            completion = Completion(action, completion_ids=ids, logprobs=[0.0] * len(ids))
            replayed.extend_tokens(
                policy.continuation_ids(messages[:at], completion, [messages[at + 1]], info)
            )
    return replayed
