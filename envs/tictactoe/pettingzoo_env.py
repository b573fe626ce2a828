"""Two-seat text tic-tac-toe as a PettingZoo AEC env (the PettingZoo twin of ``TicTacToe-v0``).

Both seats see the prompts of :class:`~textgym.envs.tictactoe.TicTacToeEnv` (each seat in its
own ``prompt_style``, ``"full"`` or ``"compact"``) and answer with whole completions; moves are read by the same parser and invalid actions are handled the same
way (an explanatory observation, the board unchanged, the same seat to move again). The rules
come from :mod:`.board`; this module only keeps turns, seats and texts. PettingZoo is an
optional dependency (``pip install "textgym[multiagent]"``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from pettingzoo import AECEnv
from pettingzoo.utils import wrappers

from textgym.checks import check_choice, check_int
from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.env import OUTCOME_REWARD
from textgym.envs.tictactoe.start_positions import check_start_board
from textgym.envs.tictactoe.text import (  # shared with TicTacToe-v0 so the texts are the same
    PROMPT_STYLES,
    FullText,
    new_game_sentence,
    opponent_played_sentence,
    played_sentence,
    read_action,
    render_board,
    start_position_sentence,
)
from textgym.spaces import UnicodeText

__all__ = ["SEATS", "TicTacToeTextAEC", "env"]

#: Seat names; which seat plays X is decided at each reset (``first_player``).
SEATS = ("player_0", "player_1")
FIRST_PLAYERS = (*SEATS, "random")


def _check_prompt_style(value: Any) -> dict[str, FullText]:
    """``prompt_style`` as ``{seat: text style}``: one style for both seats, or one per seat."""
    if isinstance(value, str) and value in PROMPT_STYLES:
        return dict.fromkeys(SEATS, PROMPT_STYLES[value])
    if (
        isinstance(value, Mapping)
        and set(value) == set(SEATS)
        and all(isinstance(v, str) and v in PROMPT_STYLES for v in value.values())
    ):
        return {seat: PROMPT_STYLES[value[seat]] for seat in SEATS}
    raise ValueError(
        f"Expected prompt_style in {tuple(PROMPT_STYLES)} or a mapping of both seats to one of them "
        f"(e.g. {{'player_0': 'full', 'player_1': 'compact'}}), got {value!r}"
    )


class TicTacToeTextAEC(AECEnv):
    """Text tic-tac-toe for two seats (PettingZoo AEC API), with the prompts of TicTacToe-v0.

    Description:
        Two agents, ``"player_0"`` and ``"player_1"``, play one game. Which seat plays X (and
        moves first) is set by ``first_player``. Each seat sees exactly what a
        ``TicTacToeEnv`` agent of its mark would see against an opponent that made the other
        seat's moves, in that seat's ``prompt_style``, so a policy written (or trained) for
        ``TicTacToe-v0`` plays here unchanged. Seats may use different styles, e.g. a person
        reading the full board against a model that sees the compact prompt it was trained on.

    Action Space:
        ``UnicodeText(65536)`` per seat: the whole completion, read like ``TicTacToe-v0``
        (last ``<move>N</move>`` outside ``<think>``, ``N`` a row-major cell 0-8). A finished
        seat's only valid action is ``None`` (PettingZoo's rule).

    Observation Space:
        ``UnicodeText(2048)`` per seat. For the seat to move: what happened since it last
        acted, the board with free cells shown as indices, the available positions and "Your
        turn"; after an invalid action, why it was invalid. The other seat's observation ends
        with "Waiting for the opponent". At the end both see the result. A seat in compact
        style sees ``TicTacToe-v0``'s compact texts instead: ``opp N`` (the other seat's move
        since this seat last acted), the board as three rows of ``X``/``O``/free-cell digits
        and ``free ...``; ``invalid REASON`` and the board after an invalid action;
        ``over OUTCOME`` at the end; while waiting, the three rows and ``waiting``.

    Starting State:
        An empty board, X to move; or the position ``reset(options={"board": ...})`` gives
        (a legal unfinished board, refused otherwise as ``TicTacToe-v0`` refuses it), the mark
        to move that board's, each seat told the game continues from it.

    Rewards:
        Per seat, paid when the game ends: win 1.0, draw 0.5, loss 0.0 (``OUTCOME_REWARD``);
        0.0 otherwise, including invalid actions and truncation.

    Episode End:
        Both seats terminate when a player has three in a line or the board is full. Both are
        truncated when a seat has taken ``max_actions_per_seat`` actions (invalid ones count)
        and the game is not over; the default 10 is ``TicTacToe-v0``'s time limit.

    Information:
        Per seat, in ``infos[seat]`` (returned by ``last()``):

        - ``system_prompt`` [reset]: rules and answer format for this seat's mark; kept in
          the seat's info until its first action, so the second seat's first ``last()`` has it.
        - ``tools`` [reset]: always ``[]``; kept like ``system_prompt``.
        - ``task_id`` [reset, step]: ``"tictactoe-{mark}-selfplay"``.
        - ``agent_mark`` [reset, step]: this seat's mark.
        - ``board`` [reset, step]: the board, 9 characters ``X``/``O``/``.``, row-major.
        - ``legal_moves`` [reset, step]: free cells (empty once the game is over).
        - ``to_move`` [reset, step]: the seat whose turn it is, or ``None`` when over.
        - ``outcome`` [reset, step]: ``None`` while playing, else this seat's ``"win"``,
          ``"draw"`` or ``"loss"``.
        - ``agent_move`` [step]: this seat's last cell, if its last action was a move.
        - ``opponent_move`` [step]: the other seat's cell since this seat last acted, or ``None``.
        - ``invalid_action`` [step]: whether this seat's last action was rejected.
        - ``invalid_reason`` [step]: why, or ``None`` (reasons of ``TicTacToe-v0``).
        - ``reward_components`` [step]: ``{"outcome": float}`` of the last step.

        Unlike PettingZoo's array envs there is no ``action_mask`` key: actions are text, and
        ``legal_moves`` lists the free cells.

    Arguments:
        - ``first_player``: ``"player_0"`` (default), ``"player_1"`` or ``"random"`` (drawn
          from the env's RNG at each reset); that seat plays X. ``reset(options=...)`` accepts
          the same key for one game, and ``board`` (a start position, as ``TicTacToe-v0``'s
          option); any other key is ignored with a ``UserWarning`` (``TicTacToe-v0`` refuses
          it, but PettingZoo's API test requires that ``reset`` accept any options).
        - ``max_actions_per_seat``: int >= 5, default 10.
        - ``prompt_style``: ``"full"`` (default) or ``"compact"`` for both seats, or a mapping
          ``{"player_0": style, "player_1": style}`` giving each seat its own. Sets the seat's
          system prompt and observations exactly as ``TicTacToeEnv(prompt_style=...)`` does;
          rules, rewards and info are the same in both styles.
        - ``render_mode``: ``None``, ``"ansi"`` (returns the board) or ``"human"`` (prints it).

    Raises:
        ValueError: for an argument outside the values above, or a non-``None`` action from a
            finished seat.
        TypeError: from ``step`` if a live seat's action is not a ``str``.

    Version History:
        - v0: initial release (``tictactoe_text_v0``).

    A Parallel view is not provided: the game is turn-based and an invalid action gives the
    same seat another turn, so there is no joint action of both seats at any step
    (``metadata["is_parallelizable"]`` is ``False``; ``aec_to_parallel`` refuses it).
    """

    metadata = {
        "name": "tictactoe_text_v0",
        "render_modes": ["ansi", "human"],
        "is_parallelizable": False,
        "render_fps": 1,
    }

    def __init__(
        self,
        first_player: str = "player_0",
        max_actions_per_seat: int = 10,
        render_mode: str | None = None,
        prompt_style: str | Mapping[str, str] = "full",
    ):
        super().__init__()
        check_choice("first_player", first_player, FIRST_PLAYERS)
        check_int(
            "max_actions_per_seat", max_actions_per_seat, low=5, hint="a seat needs up to 5 moves"
        )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"Expected render_mode in {self.metadata['render_modes']} or None, "
                f"got {render_mode!r}"
            )
        self._texts = _check_prompt_style(prompt_style)  # each seat's style, chosen once
        self.prompt_style = (
            prompt_style
            if isinstance(prompt_style, str)
            else {seat: text.name for seat, text in self._texts.items()}
        )
        self.first_player = first_player
        self.max_actions_per_seat = max_actions_per_seat
        self.render_mode = render_mode
        self.possible_agents = list(SEATS)
        self.agents = list(SEATS)
        self.observation_spaces = {seat: UnicodeText(2048) for seat in SEATS}
        self.action_spaces = {seat: UnicodeText(65536) for seat in SEATS}
        self._np_random: np.random.Generator | None = None
        self._board = B.EMPTY_BOARD
        self._marks = {"player_0": "X", "player_1": "O"}
        self._news: dict[str, list[str]] = {seat: [] for seat in SEATS}
        # The other seat's move since this seat last acted (the compact style's ``opp N``).
        self._opponent_moves: dict[str, int | None] = dict.fromkeys(SEATS)
        self._observations: dict[str, str] = dict.fromkeys(SEATS, "")
        self._actions_taken = dict.fromkeys(SEATS, 0)
        self.rewards = dict.fromkeys(SEATS, 0.0)
        self._cumulative_rewards = dict.fromkeys(SEATS, 0.0)
        self.terminations = dict.fromkeys(SEATS, False)
        self.truncations = dict.fromkeys(SEATS, False)
        self.infos: dict[str, dict[str, Any]] = {seat: {} for seat in SEATS}
        self.agent_selection = "player_0"

    # -- PettingZoo API -------------------------------------------------------------------
    def observation_space(self, agent: str) -> UnicodeText:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> UnicodeText:
        return self.action_spaces[agent]

    @property
    def board(self) -> str:
        """The current board (see :mod:`textgym.envs.tictactoe.board`)."""
        return self._board

    def mark_of(self, seat: str) -> str:
        """The mark ``seat`` plays this game."""
        return self._marks[seat]

    def observe(self, agent: str) -> str:
        return self._observations[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = set(options) - {"first_player", "board"}
        if unknown:
            # TicTacToe-v0 refuses them; PettingZoo's own API test requires that reset accept
            # any options (api_test resets with {"options": 1}), so here they are ignored, but
            # never silently.
            warnings.warn(
                f"Unknown reset options {sorted(unknown)[:5]} ignored; the twin reads only "
                "'first_player' and 'board'",
                UserWarning,
                stacklevel=2,
            )
        start = check_start_board(options.get("board"), None)
        first = check_choice(
            "first_player", options.get("first_player", self.first_player), FIRST_PLAYERS
        )
        # Seeded only once every option passed: a refused reset has no effect at all.
        if seed is not None or self._np_random is None:
            self._np_random, _ = seeding.np_random(seed)
        if first == "random":
            first = SEATS[int(self._np_random.integers(2))]
        second = SEATS[1 - SEATS.index(first)]
        self._marks = {first: "X", second: "O"}
        self._board = B.EMPTY_BOARD if start is None else start
        self.agents = list(SEATS)
        self.rewards = dict.fromkeys(SEATS, 0.0)
        self._cumulative_rewards = dict.fromkeys(SEATS, 0.0)
        self.terminations = dict.fromkeys(SEATS, False)
        self.truncations = dict.fromkeys(SEATS, False)
        self._actions_taken = dict.fromkeys(SEATS, 0)
        mover = B.to_move(self._board)
        if start is None:
            self._news = {first: [new_game_sentence("X")], second: [new_game_sentence("O")]}
        else:
            self._news = {
                seat: [start_position_sentence(mark, to_move=mark == mover)]
                for seat, mark in self._marks.items()
            }
        self._opponent_moves = dict.fromkeys(SEATS)
        self.agent_selection = first if mover == "X" else second
        self.infos = {}
        for seat in SEATS:
            mark = self._marks[seat]
            self.infos[seat] = {
                "system_prompt": self._texts[seat].system_prompt(mark),
                "tools": [],
                **self._info(seat, None),
            }
        self._refresh_observations(outcome=None)

    def step(self, action: str | None) -> None:
        seat = self.agent_selection
        if self.terminations[seat] or self.truncations[seat]:
            self._was_dead_step(action)
            return
        if not isinstance(action, str):
            raise TypeError(
                f"Expected the action of {seat} to be a str (the completion), "
                f"got {type(action).__name__}"
            )
        other = SEATS[1 - SEATS.index(seat)]
        self._cumulative_rewards[seat] = 0.0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._actions_taken[seat] += 1

        move, reason, why = read_action(self._board, action, self.action_spaces[seat])
        outcome: str | None = None
        if reason is not None:
            self._refuse(seat, reason, why)
        else:
            outcome = self._play(seat, other, move)

        if outcome is not None:
            for s in SEATS:
                self.rewards[s] = OUTCOME_REWARD[self._seat_outcome(s, outcome)]
            self.terminations = dict.fromkeys(self.agents, True)
        elif self._actions_taken[seat] >= self.max_actions_per_seat:
            self.truncations = dict.fromkeys(self.agents, True)
        for s in SEATS:
            self.infos[s]["reward_components"] = {"outcome": float(self.rewards[s])}
        self._accumulate_rewards()
        if self.render_mode == "human":
            self.render()

    def _refuse(self, seat: str, reason: str, why: str | None) -> None:
        """An invalid action of ``seat``: as in TicTacToe-v0, the board is unchanged and the
        same seat answers again."""
        self._news[seat] = []
        self._opponent_moves[seat] = None
        self._observations[seat] = self._texts[seat].invalid(
            self._board, self._marks[seat], reason, why
        )
        self.infos[seat] = {
            **self._info(seat, None),
            "agent_move": None,
            "opponent_move": None,
            "invalid_action": True,
            "invalid_reason": reason,
        }

    def _play(self, seat: str, other: str, move: int) -> str | None:
        """``seat`` plays the legal ``move``; both seats' news, infos and observations follow.
        Returns the game's outcome for X (``None`` while it goes on)."""
        self._board = B.apply_move(self._board, move)
        self._news[seat] = [played_sentence(move)]
        self._news[other].append(opponent_played_sentence(self._marks[seat], move))
        self._opponent_moves[seat], self._opponent_moves[other] = None, move
        outcome = self._outcome_of("X")
        if outcome is None:
            self.agent_selection = other
        # The other seat's last action, if any, was a legal move (else it would still move).
        self.infos[seat] = {
            **self._info(seat, outcome),
            "agent_move": move,
            "opponent_move": None,
            "invalid_action": False,
            "invalid_reason": None,
        }
        previous = self.infos[other]
        self.infos[other] = {
            **self._info(other, outcome),
            "agent_move": previous.get("agent_move"),
            "opponent_move": move,
            "invalid_action": False,
            "invalid_reason": None,
        }
        if self._actions_taken[other] == 0:  # the reset keys stay until the seat first acts
            self.infos[other].update(
                system_prompt=previous["system_prompt"], tools=previous["tools"]
            )
        self._refresh_observations(outcome)
        return outcome

    def render(self) -> str | None:
        """``"ansi"``: the board as text; ``"human"``: print it; ``None``: nothing."""
        if self.render_mode is None:
            return None
        text = render_board(self._board)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Nothing to release."""

    # -- internals ------------------------------------------------------------------------
    def _outcome_of(self, mark: str) -> str | None:
        """Outcome of the game for ``mark`` (``None`` while playing)."""
        won = B.winner(self._board)
        if won is not None:
            return "win" if won == mark else "loss"
        return "draw" if B.is_full(self._board) else None

    def _seat_outcome(self, seat: str, outcome_for_x: str) -> str:
        if self._marks[seat] == "X" or outcome_for_x == "draw":
            return outcome_for_x
        return "loss" if outcome_for_x == "win" else "win"

    def _info(self, seat: str, outcome_for_x: str | None) -> dict[str, Any]:
        """The keys every info of ``seat`` has (see the class docstring)."""
        over = outcome_for_x is not None
        return {
            "task_id": f"tictactoe-{self._marks[seat]}-selfplay",
            "agent_mark": self._marks[seat],
            "board": self._board,
            "legal_moves": B.legal_moves(self._board),
            "to_move": None if over else self.agent_selection,
            "outcome": self._seat_outcome(seat, outcome_for_x) if over else None,
        }

    def _refresh_observations(self, outcome: str | None) -> None:
        """Rebuild both seats' observations, each in its style, after a reset or a legal move."""
        for seat in SEATS:
            self._observations[seat] = self._texts[seat].observation(
                self._board,
                self._marks[seat],
                self._news[seat],
                self._opponent_moves[seat],
                None if outcome is None else self._seat_outcome(seat, outcome),
                waiting=seat != self.agent_selection,
            )


def env(**kwargs: Any) -> AECEnv:
    """Build the AEC env behind PettingZoo's ``OrderEnforcingWrapper`` (PettingZoo's convention).

    Keyword arguments go to :class:`TicTacToeTextAEC`. PettingZoo's ``AssertOutOfBounds`` and
    ``TerminateIllegal`` wrappers are not used: actions are text, and invalid ones are answered
    with an explanation instead of ending the game.
    """
    return wrappers.OrderEnforcingWrapper(TicTacToeTextAEC(**kwargs))
