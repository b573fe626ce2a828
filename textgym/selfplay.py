"""Batched self-play: two policies (or one in both seats) play the two-seat text tic-tac-toe.

:func:`selfplay` runs many games of the PettingZoo AEC env ``tictactoe_text_v0`` at once, like
:func:`textgym.rollout.rollout`: on each turn it gathers the conversation of every live game's
seat to move and makes one batched ``act`` call per distinct policy (a single call when one
policy sits in both seats). Each seat's side of a game is recorded as a
:class:`~textgym.rollout.Trajectory`, so self-play games export to the same JSONL records as
single-agent rollouts. :func:`selfplay_summary` tallies results per seat and per mark.
Needs PettingZoo (``pip install "textgym[multiagent]"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from textgym.checks import check_choice, check_int
from textgym.policies.base import Policy, conversation_start
from textgym.rollout import Trajectory

__all__ = ["SelfPlayGame", "selfplay", "selfplay_summary"]

ENV_NAME = "tictactoe_text_v0"
FIRST_PLAYER_MODES = ("alternate", "player_0", "player_1", "random")


@dataclass
class SelfPlayGame:
    """One finished game between two seats.

    Attributes:
        seed: Seed passed to ``reset``.
        marks: ``{seat: "X" | "O"}``.
        policies: ``{seat: policy name}``.
        trajectories: ``{seat: Trajectory}``: the seat's conversation (system prompt, its
            observations as user turns, its completions as assistant turns, the final
            observation last), one reward per action (what ``last()`` reported before the seat's
            next turn or at the end), invalid-action flags and its outcome.
        outcomes: ``{seat: "win" | "draw" | "loss" | None}`` (``None`` if truncated).
        terminated: The game ended by the rules.
        truncated: A seat ran out of actions (``max_actions_per_seat``).
    """

    seed: int | None
    marks: dict[str, str]
    policies: dict[str, str]
    trajectories: dict[str, Trajectory] = field(default_factory=dict)
    outcomes: dict[str, str | None] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False

    @property
    def winner_mark(self) -> str | None:
        """``"X"`` or ``"O"`` for the winning mark, ``None`` for a draw or a truncated game."""
        for seat, outcome in self.outcomes.items():
            if outcome == "win":
                return self.marks[seat]
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record; each seat's trajectory as :meth:`Trajectory.to_dict`."""
        return {
            "seed": self.seed,
            "marks": dict(self.marks),
            "policies": dict(self.policies),
            "outcomes": dict(self.outcomes),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "trajectories": {seat: t.to_dict() for seat, t in self.trajectories.items()},
        }


_SEATS = ("player_0", "player_1")


@dataclass
class _Live:
    env: Any
    index: int
    game: SelfPlayGame
    started: set[str] = field(default_factory=set)
    system_prompts: dict[str, str] = field(default_factory=dict)


def _default_env(**kwargs: Any) -> Any:
    from textgym.envs.tictactoe.pettingzoo_env import env  # PettingZoo only when asked for

    return env(**kwargs)


def selfplay(
    policies: Policy | Sequence[Policy],
    seeds: Sequence[int | None],
    *,
    batch_size: int = 8,
    first_player: str = "alternate",
    make_env: Callable[[], Any] | None = None,
    on_game_end: Callable[[SelfPlayGame], None] | None = None,
) -> list[SelfPlayGame]:
    """Play one game per seed, up to ``batch_size`` at once; return them in seed order.

    Each turn: every live game runs until a seat must act (:func:`_advance`; a finished game
    hands its env to the next seed), then one batched ``act`` call per distinct policy over the
    games where it is to move (:func:`_play_turn`).

    Args:
        policies: One :class:`~textgym.policies.Policy` for both seats, or two for
            ``("player_0", "player_1")``.
        seeds: One ``reset`` seed per game.
        batch_size: Largest number of live games, >= 1.
        first_player: Which seat plays X: ``"alternate"`` (``player_0`` in even-numbered games,
            ``player_1`` in odd ones, so each seat plays both marks equally often),
            ``"player_0"``, ``"player_1"`` or ``"random"`` (the env draws it from the seed).
        make_env: Builds one AEC env (default ``tictactoe_text_v0.env()``); each is reused.
        on_game_end: Called with each finished game.

    Returns:
        ``len(seeds)`` games, ``result[i]`` played with ``seeds[i]``.

    Raises:
        ValueError: for a wrong number of policies, ``batch_size < 1``, an unknown
            ``first_player``, or a policy returning the wrong number of completions.
    """
    by_seat = _seat_policies(policies)
    check_int("batch_size", batch_size, low=1)
    check_choice("first_player", first_player, FIRST_PLAYER_MODES)
    make_env = make_env or _default_env
    queue = list(range(len(seeds)))[::-1]
    results: list[SelfPlayGame | None] = [None] * len(seeds)

    def start(env: Any) -> _Live:
        index = queue.pop()
        first = first_player if first_player != "alternate" else _SEATS[index % 2]
        return _start_game(env, index, seeds[index], first, by_seat)

    def until_a_seat_acts(slot: _Live) -> _Live | None:
        """The slot's game once a seat must act; finished games are handed on and their env
        starts the next seed. ``None`` when the env is done (no seed left)."""
        while not _advance(slot):
            results[slot.index] = slot.game
            if on_game_end is not None:
                on_game_end(slot.game)
            if not queue:
                return None
            slot = start(slot.env)
        return slot

    envs = [make_env() for _ in range(min(batch_size, len(seeds)))]
    try:
        live = [start(env) for env in envs]
        while live:
            live = [s for slot in live if (s := until_a_seat_acts(slot)) is not None]
            _play_turn(live, by_seat)
    finally:
        for env in envs:
            env.close()
    return [g for g in results if g is not None]


def _seat_policies(policies: Policy | Sequence[Policy]) -> dict[str, Policy]:
    """``{seat: policy}``: one policy in both seats, or one per seat."""
    seat_policies = [policies, policies] if not isinstance(policies, Sequence) else list(policies)
    if len(seat_policies) != 2:
        raise ValueError(f"Expected one policy or two (one per seat), got {len(seat_policies)}")
    return dict(zip(_SEATS, seat_policies))


def _start_game(
    env: Any, index: int, seed: int | None, first: str, by_seat: Mapping[str, Policy]
) -> _Live:
    """Reset ``env`` for game ``index`` with ``first`` playing X; open each seat's trajectory."""
    env.reset(seed=seed, options={"first_player": first})
    game = SelfPlayGame(
        seed=seed,
        marks={seat: env.infos[seat]["agent_mark"] for seat in _SEATS},
        policies={seat: by_seat[seat].name for seat in _SEATS},
    )
    slot = _Live(env, index, game)
    for seat in _SEATS:
        info = env.infos[seat]
        slot.system_prompts[seat] = info.get("system_prompt", "")
        game.trajectories[seat] = Trajectory(
            env_id=ENV_NAME, seed=seed, task_id=info.get("task_id")
        )
    return slot


def _advance(slot: _Live) -> bool:
    """Credit rewards and run finished seats' ``None`` steps; False once the game is over."""
    env = slot.env
    while env.agents:
        seat = env.agent_selection
        obs, reward, terminated, truncated, info = env.last()
        traj = slot.game.trajectories[seat]
        if seat in slot.started:
            traj.rewards.append(float(reward))
            traj.reward_components.append({"outcome": float(reward)})
            traj.messages.append({"role": "user", "content": obs})
        else:
            traj.messages = conversation_start(
                obs, {**info, "system_prompt": slot.system_prompts[seat]}
            )
            slot.started.add(seat)
        if not (terminated or truncated):
            return True
        traj.terminated, traj.truncated = bool(terminated), bool(truncated)
        traj.outcome = info.get("outcome")
        slot.game.outcomes[seat] = traj.outcome
        slot.game.terminated, slot.game.truncated = bool(terminated), bool(truncated)
        env.step(None)
    return False


def _play_turn(live: Sequence[_Live], by_seat: Mapping[str, Policy]) -> None:
    """One batched ``act`` call per distinct policy object over the games where it is to
    move; each game's env steps with its completion."""
    groups: dict[int, list[_Live]] = {}
    for slot in live:
        groups.setdefault(id(by_seat[slot.env.agent_selection]), []).append(slot)
    for group in groups.values():
        policy = by_seat[group[0].env.agent_selection]
        seats_to_move = [slot.env.agent_selection for slot in group]
        completions = policy.act(
            [slot.game.trajectories[s].messages for slot, s in zip(group, seats_to_move)],
            [slot.env.infos[s] for slot, s in zip(group, seats_to_move)],
        )
        if len(completions) != len(group):
            raise ValueError(
                f"Policy {policy.name!r} returned {len(completions)} "
                f"completions for {len(group)} conversations"
            )
        for slot, seat, completion in zip(group, seats_to_move, completions):
            slot.env.step(completion.text)
            traj = slot.game.trajectories[seat]
            traj.messages.append({"role": "assistant", "content": completion.text})
            traj.invalid_actions.append(bool(slot.env.infos[seat].get("invalid_action", False)))
            traj.finish_reasons.append(completion.finish_reason)


def _tally(outcomes: Sequence[str | None]) -> dict[str, float]:
    n = len(outcomes)
    counts = {key: sum(o == key for o in outcomes) for key in ("win", "draw", "loss")}
    counts["truncated"] = sum(o is None for o in outcomes)
    return {"games": n, **counts, **{f"{k}_rate": (v / n if n else 0.0) for k, v in counts.items()}}


def selfplay_summary(games: Sequence[SelfPlayGame]) -> dict[str, Any]:
    """Tally self-play results per seat and per mark.

    Returns:
        ``{"games": n, "per_seat": {seat: tally}, "per_mark": {"X": tally, "O": tally},
        "per_seat_mark": {seat: {mark: tally}}, "invalid_action_rate": {seat: float}}``, where a
        tally is ``{"games", "win", "draw", "loss", "truncated"}`` counts plus ``*_rate``
        fractions, from that seat's or mark's point of view.
    """
    seats = _SEATS
    per_seat = {s: _tally([g.outcomes.get(s) for g in games]) for s in seats}
    per_mark = {
        m: _tally([g.outcomes.get(s) for g in games for s in seats if g.marks[s] == m])
        for m in ("X", "O")
    }
    per_seat_mark = {
        s: {m: _tally([g.outcomes.get(s) for g in games if g.marks[s] == m]) for m in ("X", "O")}
        for s in seats
    }
    invalid = {}
    for s in seats:
        flags = [f for g in games for f in g.trajectories[s].invalid_actions]
        invalid[s] = sum(flags) / len(flags) if flags else 0.0
    return {
        "games": len(games),
        "per_seat": per_seat,
        "per_mark": per_mark,
        "per_seat_mark": per_seat_mark,
        "invalid_action_rate": invalid,
    }
