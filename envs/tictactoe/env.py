"""``textgym/TicTacToe-v0``: tic-tac-toe against a seeded minimax opponent, in text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from textgym.checks import check_choice, check_probability
from textgym.core import TextEnv
from textgym.envs.tictactoe import board as B
from textgym.envs.tictactoe.expert import MinimaxPolicy
from textgym.envs.tictactoe.opponent import (
    OPPONENT_STYLES,
    OPTIMAL_STYLES,
    opponent_move,
)
from textgym.envs.tictactoe.parsing import is_well_formed
from textgym.envs.tictactoe.start_positions import (
    check_start_board,
    check_start_boards,
    check_start_moves,
)
from textgym.envs.tictactoe.text import (
    PROMPT_STYLES,
    game_conversation,
    new_game_sentence,
    opponent_played_sentence,
    played_sentence,
    read_action,
    start_position_sentence,
)
from textgym.spaces import UnicodeText

__all__ = ["OUTCOME_REWARD", "TicTacToeEnv"]

#: Outcome reward from the agent's point of view (as in anakin87's verifiers environment).
OUTCOME_REWARD: dict[str, float] = {"win": 1.0, "draw": 0.5, "loss": 0.0}

#: The ``opponent`` values: the minimax, the random player, then the other styles of
#: :data:`~textgym.envs.tictactoe.opponent.OPPONENT_STYLES`.
OPPONENTS = ("minimax", "random", *(s for s in OPPONENT_STYLES if s != "minimax"))
AGENT_MARKS = ("X", "O", "random")


class TicTacToeEnv(TextEnv):
    """Tic-tac-toe against a seeded minimax opponent of controllable skill.

    Description:
        The agent plays one game of tic-tac-toe as X or O against a scripted opponent. With
        ``opponent="minimax"`` the opponent plays an optimal move chosen uniformly at random
        among all optimal moves (faster wins and slower losses preferred), except that with
        probability ``random_move_prob`` it plays a uniformly random legal move. Its randomness
        depends only on (episode seed, board), so the copies of a GRPO group that reach the
        same position see the same reply. Rules and rewards follow anakin87's verifiers
        tic-tac-toe environment. Other ``opponent`` styles (see Arguments) play outside that
        distribution, for evaluation and training against opponents the policy has not met;
        they draw among their candidate moves in the same seeded way and also play a random
        move with probability ``random_move_prob``.

    Action Space:
        ``UnicodeText(65536)``: the agent's whole completion. The move is read from the last
        ``<move>N</move>`` tag outside ``<think>...</think>`` blocks, ``N`` a row-major cell
        index 0-8. Any ``str`` is accepted by ``step``; one longer than 65,536 characters is an
        invalid action (``"too_long"``, board unchanged) and is not read at all, the rule every
        textgym env follows (:mod:`textgym.spaces`).

    Observation Space:
        ``UnicodeText(2048)``: what happened last (the agent's and the opponent's moves, or why
        the action was invalid), the board with each free cell shown as its index, the
        available positions and "Your turn", or the result when the game is over.

    Starting State:
        An empty board. When the agent plays O the opponent's opening move is already played
        and reported in the first observation. ``agent_mark="random"`` draws the mark from
        ``np_random`` at each reset. ``reset(options={"board": ...})`` starts from a given
        position instead, the agent to move, and ``reset(options={"moves": ...})`` a game
        part-way through with its conversation so far (Arguments).

    Rewards:
        ``outcome`` only, paid on the final step: win 1.0, draw 0.5, loss 0.0; 0.0 on every
        other step, including invalid actions and a truncated game. Wrappers in
        :mod:`textgym.wrappers` add format rewards and invalid-action penalties.

    Episode End:
        Terminated when a player has three in a line or the board is full. Truncated by the
        registered ``max_episode_steps=10`` (invalid actions count as steps).

    Information:
        ``reward_components`` values are the terms of the step reward and sum to it.

        - ``system_prompt`` [reset]: rules and answer format, for the chat's system message.
        - ``tools`` [reset]: always ``[]``; the task has no tools.
        - ``history`` [reset, optional]: only in a game started part-way through (``moves``):
          the conversation before the first observation (user and assistant messages, the
          agent's earlier moves written as ``<move>N</move>``); rollouts put it between the
          system prompt and the first observation
          (:func:`textgym.policies.base.conversation_start`).
        - ``task_id`` [reset, step]: ``"tictactoe-{mark}-{opponent}-p{random_move_prob:.3f}"``.
        - ``agent_mark`` [reset, step]: ``"X"`` or ``"O"``.
        - ``opponent`` [reset, step]: the opponent's style this episode (see Arguments).
        - ``random_move_prob`` [reset, step]: float in [0, 1] used this episode.
        - ``board`` [reset, step]: the board as 9 characters ``X``/``O``/``.``, row-major.
        - ``legal_moves`` [reset, step]: list of free cells (empty once the game is over).
        - ``opponent_move`` [reset, step]: the opponent's cell played since the last
          observation, or ``None``.
        - ``opponent_move_random`` [reset, step]: whether that move was a random one.
        - ``outcome`` [reset, step]: ``None`` while playing, else ``"win"``, ``"draw"`` or
          ``"loss"``.
        - ``agent_move`` [step]: the agent's cell, or ``None`` if the action was invalid.
        - ``invalid_action`` [step]: ``True`` if the action was rejected (board unchanged).
        - ``invalid_reason`` [step]: why, or ``None``; one of ``"too_long"``, ``"no_move_tag"``,
          ``"not_an_integer"``, ``"out_of_range"``, ``"occupied"``.
        - ``reward_components`` [step]: ``{"outcome": float}``.

    Arguments:
        - ``opponent``: the opponent's style of play. Each draws uniformly among its candidate
          moves with the episode's seeded uniforms:

          - ``"minimax"`` (default): every optimal move, faster wins and slower losses
            preferred.
          - ``"random"``: every legal move (a uniformly random player).
          - ``"minimax_last"``: the last (highest-numbered) of the minimax's optimal moves; an
            optimal player with a deterministic tie-break.
          - ``"minimax_any"``: every move that keeps the game-theoretic result, with no
            preference for faster wins; optimal, over many more lines than ``"minimax"``.
          - ``"safe_best"``: the optimal moves that score best against a uniformly random
            player (``opponent.safe_best_moves``); optimal, and the strongest exploiter of weak
            play among the optimal styles.
          - ``"fork"``: Crowley & Siegler's (1993) rules: win, block, fork, block a fork,
            centre, opposite corner, corner, edge. Never loses.
          - ``"greedy_center"``: win, else block, else centre, corner, edge. Can be forked.
          - ``"greedy_edge"``: win, else block, else edge, corner, centre. Can be forked.

          Rules in :mod:`textgym.envs.tictactoe.strategies` and
          :mod:`textgym.envs.tictactoe.opponent`. A list of styles (e.g. ``["minimax",
          "fork", "greedy_center"]``) draws one uniformly per episode from the episode's seed,
          so the copies of a GRPO group face the same style (training against a mix of
          opponents). ``info["opponent"]`` names the style drawn.
        - ``random_move_prob``: float in [0, 1], default 0.0 (the style's own play): the
          probability of a uniformly random legal move instead. Ignored by the random
          opponent.
        - ``agent_mark``: ``"X"`` (default), ``"O"`` or ``"random"``.
        - ``prompt_style``: ``"full"`` (default; the rules, a drawn board and sentences) or
          ``"compact"`` (a one-line rule, the board as three rows of ``X``/``O``/free-cell
          digits, ``free ...``, ``opp N`` for the opponent's move, ``invalid REASON``,
          ``over OUTCOME``): about a fifth of the tokens, for small models trained on a CPU.
          Rules, rewards and info are the same.

        - ``start_boards``: ``None`` (default: every episode starts on the empty board), a
          list of start positions (each as the ``board`` reset option below, or a list of
          cells as the ``moves`` reset option: the game so far, its conversation included), a
          path to a ``.json`` file of such a list (for thousands of boards), or
          ``"critical"``: every reachable position where some move changes the game's result
          (:func:`~textgym.envs.tictactoe.opponent.critical_positions`, 3,191 boards). Each
          episode starts, with probability ``start_board_prob``, from one of them drawn
          uniformly from the episode's seed (the copies of a GRPO group share it), the agent
          playing the mark to move: a start-state distribution, e.g. to practise the positions
          a policy misreads.
        - ``start_board_prob``: float in [0, 1], default 1.0; ignored without ``start_boards``.

        ``reset(options=...)`` accepts the same three keys to override them for one episode,
        and ``board``: a start position (9 characters ``X``/``O``/``.``, row-major) reachable
        in a legal game and not finished. The agent then plays the mark to move on it (X when
        the counts are equal); an ``agent_mark`` given with it must be that mark, and the
        env's own ``agent_mark`` is not used. The episode is the rest of that game: the same
        opponent, rewards and step limit, the first observation reporting the position. For
        start-state distributions (training from the positions a policy misreads). Or
        ``moves``: the cells played so far from the empty board, X first, not ending the game;
        the agent plays the mark to move after them (``agent_mark`` as with ``board``), its
        first observation is the one it would have seen at that turn, and ``info["history"]``
        holds the game's earlier turns. A position met in-game is learnt in its in-game
        context: the same board as a first turn is another prompt.

    Raises:
        ValueError: from ``__init__`` or ``reset`` for an argument outside the values above.
        TypeError: from ``step`` if the action is not a ``str``.
        RuntimeError: from ``step`` after the game has terminated, before ``reset``.

    Version History:
        - v0: initial release; an action over the action space's length is an invalid action
          (``"too_long"``), not parsed; the ``opponent`` styles beyond ``"minimax"`` and
          ``"random"`` added, then the ``board`` reset option, then ``start_boards``, then the
          ``moves`` reset option and move lists in ``start_boards``; the default behaviour
          unchanged.
    """

    #: How `textgym play` turns a bare number typed by a person into an action.
    action_template = "<move>{}</move>"
    #: Where a completion can stop: nothing after the move tag is read.
    stop_strings = ("</move>",)
    #: Think, then move (the format of anakin87's verifiers environment); for ``FormatReward``.
    is_well_formed = staticmethod(is_well_formed)
    #: ``reset(options={"random_move_prob": p})`` sets the opponent's strength per episode.
    has_opponent = True
    #: The step info's keys (Information above); ``WinSpeedBonus`` reads outcome and board.
    info_keys = frozenset(
        {
            "task_id",
            "agent_mark",
            "opponent",
            "random_move_prob",
            "board",
            "legal_moves",
            "opponent_move",
            "opponent_move_random",
            "outcome",
            "agent_move",
            "invalid_action",
            "invalid_reason",
            "reward_components",
        }
    )
    #: The optimal player (``textgym collect --policy minimax`` makes SFT data).
    expert_policy = "minimax"

    @classmethod
    def make_expert(
        cls, *, seed: Any = None, env_kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> MinimaxPolicy:
        """:class:`~textgym.envs.tictactoe.expert.MinimaxPolicy` with ``options`` (``reasoning``,
        ``style``, ``tie_break``); it plays from the board, so ``env_kwargs`` do not matter."""
        return MinimaxPolicy(seed=seed, **options)

    #: The two ends of the opponent's strength: a uniformly random player and a perfect one
    #: (styles named, so an env made with a list of styles is still evaluated against these).
    evaluation_settings = MappingProxyType(
        {
            "random": {"opponent": "random", "random_move_prob": 1.0},
            "optimal": {"opponent": "minimax", "random_move_prob": 0.0},
        }
    )

    def __init__(
        self,
        opponent: str | list[str] | tuple[str, ...] = "minimax",
        random_move_prob: float = 0.0,
        agent_mark: str = "X",
        render_mode: str | None = None,
        prompt_style: str = "full",
        start_boards: str | Sequence[str | Sequence[int]] | None = None,
        start_board_prob: float = 1.0,
    ):
        self.opponent = _check_opponent(opponent)
        self.start_boards = check_start_boards(start_boards)
        self.start_board_prob = check_probability("start_board_prob", start_board_prob)
        self.random_move_prob = check_probability("random_move_prob", random_move_prob)
        self.agent_mark = check_choice("agent_mark", agent_mark, AGENT_MARKS)
        self.prompt_style = check_choice("prompt_style", prompt_style, tuple(PROMPT_STYLES))
        self._text = PROMPT_STYLES[prompt_style]  # the style is chosen here, once
        self._init_render(render_mode)
        self.observation_space = UnicodeText(2048)
        self.action_space = UnicodeText(65536)
        self._board = B.EMPTY_BOARD
        self._mark = "X"
        self._episode_opponent = opponent if isinstance(opponent, str) else opponent[0]
        self._episode_prob = self.random_move_prob
        self._episode_key = 0
        self._task_id = ""
        self._done = True

    # -- public helpers -------------------------------------------------------------------
    @property
    def max_return(self) -> float:
        """The most a game returns against this env's opponent, what ``textgym check``'s oracle
        must reach: 0.5 (a draw, the value of tic-tac-toe) from the empty board against an
        opponent that always plays optimally (every style optimal, ``random_move_prob`` 0),
        else 1.0 (a win, which a weaker opponent allows but does not promise)."""
        styles = (self.opponent,) if isinstance(self.opponent, str) else tuple(self.opponent)
        optimal = self.random_move_prob == 0.0 and set(styles) <= set(OPTIMAL_STYLES)
        return 0.5 if optimal and not self.start_boards else 1.0

    @property
    def board(self) -> str:
        """The current board (see :mod:`textgym.envs.tictactoe.board`)."""
        return self._board

    # -- gymnasium API --------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        options = dict(options or {})
        unknown = set(options) - {"opponent", "random_move_prob", "agent_mark", "board", "moves"}
        if unknown:
            raise ValueError(
                f"Unknown reset options {sorted(unknown)}; expected any of "
                "'opponent', 'random_move_prob', 'agent_mark', 'board', 'moves'"
            )
        if "board" in options and "moves" in options:
            raise ValueError("Expected one of the reset options 'board' and 'moves', got both")
        start = check_start_board(options.get("board"), options.get("agent_mark"))
        if "moves" in options:
            start = check_start_moves(options["moves"], options.get("agent_mark"))
        # The constructor checked self.opponent; only a per-episode override needs checking.
        styles = _check_opponent(options["opponent"]) if "opponent" in options else self.opponent
        self._episode_prob = check_probability(
            "random_move_prob", options.get("random_move_prob", self.random_move_prob)
        )
        mark = check_choice("agent_mark", options.get("agent_mark", self.agent_mark), AGENT_MARKS)
        # Seeded only once every option passed: a refused reset has no effect at all.
        super().reset(seed=seed)
        # Draw order is fixed (key, then mark) so a seed always gives the same episode.
        self._episode_key = int(self.np_random.integers(0, 2**63))
        # Drawn only with start boards (after the key): other episodes keep their seeds' games.
        if start is None and self.start_boards and self.np_random.random() < self.start_board_prob:
            start = self.start_boards[int(self.np_random.integers(len(self.start_boards)))]
        if start is not None:
            mark = B.to_move(start) if isinstance(start, str) else "XO"[len(start) % 2]
        elif mark == "random":
            mark = "X" if self.np_random.random() < 0.5 else "O"
        self._mark = mark
        # Drawn only for a list of styles, after the key and the mark: a single style's
        # episodes stay what the same seed gave before lists existed.
        if isinstance(styles, str):
            self._episode_opponent = styles
        else:
            self._episode_opponent = styles[int(self.np_random.integers(len(styles)))]
        self._task_id = f"tictactoe-{mark}-{self._episode_opponent}-p{self._episode_prob:.3f}"
        self._done = False
        if isinstance(start, tuple):
            obs, info = self._resume_game(start)
        else:
            obs, info = self._new_game(start)
        info = {"system_prompt": self._text.system_prompt(mark), "tools": [], **info}
        self._emit(obs)
        return obs, info

    def _new_game(self, start: str | None) -> tuple[str, dict[str, Any]]:
        """The first observation and info of a game from the empty board (the opponent's
        opening move played when the agent is O) or from the start board ``start``."""
        self._board = B.EMPTY_BOARD if start is None else start
        opp_move, opp_random = None, False
        mark = self._mark
        news = [new_game_sentence(mark) if start is None else start_position_sentence(mark)]
        if mark == "O" and start is None:
            opp_move, opp_random = self._opponent_reply()
            news.append(opponent_played_sentence(B.other(mark), opp_move))
        obs = self._text.observation(self._board, mark, news, opp_move)
        return obs, self._info(opp_move, opp_random, None)

    def _resume_game(self, moves: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
        """The observation the agent would have seen after ``moves``, and the info with the
        game's earlier turns as ``history``."""
        self._board, messages = game_conversation(self._text, moves, self.action_template)
        opp_move = moves[-1] if moves else None
        return messages[-1]["content"], {
            "history": messages[:-1],
            **self._info(opp_move, False, None),
        }

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._check_action(action)
        if self._done:
            raise RuntimeError("The game is over; call reset() before step()")

        move, reason, why = read_action(self._board, action, self.action_space)
        if reason is not None:
            obs = self._text.invalid(self._board, self._mark, reason, why)
            info = self._info(None, False, None)
            info.update(
                agent_move=None,
                invalid_action=True,
                invalid_reason=reason,
                reward_components={"outcome": 0.0},
            )
            self._emit(obs)
            return obs, 0.0, False, False, info

        self._board = B.apply_move(self._board, move)
        news = [played_sentence(move)]
        opp_move, opp_random = None, False
        outcome = self._outcome()
        if outcome is None:
            opp_move, opp_random = self._opponent_reply()
            news.append(opponent_played_sentence(B.other(self._mark), opp_move))
            outcome = self._outcome()
        terminated = outcome is not None
        self._done = terminated
        obs = self._text.observation(self._board, self._mark, news, opp_move, outcome)
        reward = OUTCOME_REWARD[outcome] if terminated else 0.0
        info = self._info(opp_move, opp_random, outcome)
        info.update(
            agent_move=move,
            invalid_action=False,
            invalid_reason=None,
            reward_components={"outcome": reward},
        )
        self._emit(obs)
        return obs, reward, terminated, False, info

    # -- internals ------------------------------------------------------------------------

    def _opponent_reply(self) -> tuple[int, bool]:
        if self._episode_opponent == "random":
            cell, was_random = opponent_move(self._board, self._episode_key, 1.0)
        else:
            cell, was_random = opponent_move(
                self._board, self._episode_key, self._episode_prob, style=self._episode_opponent
            )
        self._board = B.apply_move(self._board, cell)
        return cell, was_random

    def _outcome(self) -> str | None:
        won = B.winner(self._board)
        if won is not None:
            return "win" if won == self._mark else "loss"
        return "draw" if B.is_full(self._board) else None

    def _info(self, opp_move: int | None, opp_random: bool, outcome: str | None) -> dict[str, Any]:
        return {
            "task_id": self._task_id,
            "agent_mark": self._mark,
            "opponent": self._episode_opponent,
            "random_move_prob": self._episode_prob,
            "board": self._board,
            "legal_moves": B.legal_moves(self._board),
            "opponent_move": opp_move,
            "opponent_move_random": bool(opp_random),
            "outcome": outcome,
        }


def _check_opponent(value: Any) -> str | tuple[str, ...]:
    """One style of :data:`OPPONENTS`, or a non-empty list/tuple of them (returned as a tuple).

    Raises:
        ValueError: an unknown style, an empty list, or neither a str nor a list/tuple.
    """
    if isinstance(value, str):
        return check_choice("opponent", value, OPPONENTS)
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(
            f"Expected opponent in {OPPONENTS} or a non-empty list of them, got {value!r}"
        )
    return tuple(check_choice("opponent", style, OPPONENTS) for style in value)
