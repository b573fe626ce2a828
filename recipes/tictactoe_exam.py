"""The tic-tac-toe position exam: a policy's move in positions where a move decides the game.

``python recipes/tictactoe_exam.py --model PATH [--marks X O] [--exam-set critical|games]
[--explore-samples K] [--output exam.json]`` (or ``--policy minimax|random``, scripted).

Exam sets:

- ``critical`` (default): every reachable position where some move changes the game's result
  (:func:`~textgym.envs.tictactoe.opponent.critical_positions`: 1,732 with X to move, 1,459
  with O), each shown as an episode's start state (``reset(options={"board": ...})``): the
  positions RL starts from with ``start_boards="critical"``.
- ``games``: every position the safe expert meets in ``--games`` games per mark against
  opponents of every strength (``random_move_prob`` stratified over [0, 1]), each shown once,
  in the conversation of the first game that reached it.

A move is ``safe`` if it keeps the position's game-theoretic value
(:func:`~textgym.envs.tictactoe.opponent.value_preserving_moves`) and ``best`` if it is also
a safe expert's move. Passing is necessary for never losing, not sufficient: a policy that
plays other safe moves reaches positions the exam does not hold. ``--explore-samples K``
then samples the model K times at ``--temperature`` in each position its greedy move gets
wrong and counts the safe samples: whether a GRPO group of 8 started there can hold a game
that differs, the only way RL corrects that move. Prints one line per mark and writes the
result (rates with binomial standard errors, every unsafe move) to ``--output``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym

import textgym  # noqa: F401
from textgym.cli.usage import script_config
from textgym.envs.tictactoe import MinimaxPolicy
from textgym.envs.tictactoe.board import to_move
from textgym.envs.tictactoe.opponent import (
    critical_positions,
    safe_best_moves,
    value_preserving_moves,
)
from textgym.envs.tictactoe.parsing import parse_move
from textgym.policies import RandomPolicy
from textgym.rollout import rollout

ENV_ID = "textgym/TicTacToe-v0"
Position = tuple[list[dict[str, Any]], dict[str, Any]]  # (conversation, info)


def rate(hits: int, n: int) -> dict[str, float]:
    """``{"rate", "stderr"}`` (binomial; NaN for ``n == 0``)."""
    p = hits / n if n else math.nan
    return {"rate": p, "stderr": math.sqrt(p * (1 - p) / n) if n else math.nan}


class _Recorder:
    """Plays the safe expert and keeps the first (conversation, info) seen at each board; with
    ``first_turn_only`` only an episode's first turn (its start state) is kept."""

    name, tokens_generated = "recorder", None

    def __init__(self, first_turn_only: bool) -> None:
        self.expert = MinimaxPolicy(reasoning=False, style="safe_best", tie_break="first")
        self.first_turn_only = first_turn_only
        self.seen: dict[str, Position] = {}

    def act(self, conversations: Any, infos: Any) -> Any:
        for conversation, info in zip(conversations, infos, strict=True):
            if not self.first_turn_only or len(conversation) <= 2:
                self.seen.setdefault(info["board"], ([dict(m) for m in conversation], dict(info)))
        return self.expert.act(conversations, infos)


def critical_exam_positions(mark: str, prompt_style: str) -> list[Position]:
    """Every critical position with ``mark`` to move as an episode's start, in board order."""
    boards = [b for b in critical_positions() if to_move(b) == mark]
    recorder = _Recorder(first_turn_only=True)
    options = [{"board": b} for b in boards]
    make = lambda: gym.make(ENV_ID, prompt_style=prompt_style)  # noqa: E731
    rollout(make, recorder, [0] * len(boards), batch_size=64, options=options)
    return [recorder.seen[b] for b in boards]


def game_exam_positions(games: int, mark: str, prompt_style: str, seed: int) -> list[Position]:
    """Every position the safe expert meets in ``games`` games as ``mark``, sorted by board."""
    recorder, strata = _Recorder(first_turn_only=False), 10
    for k in range(strata):
        kwargs = {"random_move_prob": (k + 0.5) / strata, "agent_mark": mark}
        make = lambda kwargs=kwargs: gym.make(ENV_ID, prompt_style=prompt_style, **kwargs)  # noqa: E731
        seeds = range(seed * 10**6 + k, seed * 10**6 + games, strata)
        rollout(make, recorder, seeds, batch_size=64)
    return [recorder.seen[board] for board in sorted(recorder.seen)]


def _moves(policy: Any, positions: list[Position], batch_size: int) -> list[int | None]:
    moves: list[int | None] = []
    for start in range(0, len(positions), batch_size):
        chunk = positions[start : start + batch_size]
        completions = policy.act([c for c, _ in chunk], [i for _, i in chunk])
        moves += [parse_move(c.text) for c in completions]
    return moves


def take_exam(policy: Any, positions: list[Position], batch_size: int) -> dict[str, Any]:
    """Rates of safe, best and invalid moves, unsafe moves by the number of marks on the
    board, and each unsafe move (board, move or ``None``, the safe moves)."""
    safe = best = invalid = 0
    by_marks: dict[int, int] = {}
    unsafe: list[dict[str, Any]] = []
    for (_, info), move in zip(positions, _moves(policy, positions, batch_size), strict=True):
        board = info["board"]
        invalid += move not in info["legal_moves"]
        best += move in safe_best_moves(board)
        if move in value_preserving_moves(board):
            safe += 1
        else:
            marks = 9 - board.count(".")
            by_marks[marks] = by_marks.get(marks, 0) + 1
            unsafe.append({"board": board, "move": move, "safe": value_preserving_moves(board)})
    n = len(positions)
    return {
        "positions": n,
        "safe": rate(safe, n),
        "best": rate(best, n),
        "invalid": rate(invalid, n),
        "unsafe_by_marks": dict(sorted(by_marks.items())),
        "unsafe": unsafe,
    }


def explore_unsafe(
    policy: Any, positions: list[Position], unsafe: list[dict[str, Any]], samples: int, batch: int
) -> dict[str, Any]:
    """Sample ``policy`` ``samples`` times in each ``unsafe`` position; per position ``p_safe``
    and ``sampled_moves``, and over them the mean ``p_safe``, how many never drew a safe move
    and the mean chance that a group of 8 holds one, ``1 - (1 - p_safe) ** 8``."""
    by_board = {info["board"]: (conversation, info) for conversation, info in positions}
    wanted = [by_board[u["board"]] for u in unsafe for _ in range(samples)]
    moves = _moves(policy, wanted, batch)
    for k, u in enumerate(unsafe):
        drawn = moves[k * samples : (k + 1) * samples]
        u["p_safe"] = sum(m in u["safe"] for m in drawn) / samples
        u["sampled_moves"] = {str(m): drawn.count(m) for m in sorted(set(drawn), key=str)}
    p = [u["p_safe"] for u in unsafe]
    return {
        "samples": samples,
        "positions": len(p),
        "mean_p_safe": sum(p) / len(p) if p else math.nan,
        "never_safe": sum(x == 0 for x in p),
        "group_of_8_has_safe": sum(1 - (1 - x) ** 8 for x in p) / len(p) if p else math.nan,
    }


def _policies(args: Config) -> tuple[Any, Any]:
    """The greedy (or scripted) policy and, with ``--explore-samples``, the sampled one."""
    if args.model is None:
        scripted = {"minimax": MinimaxPolicy, "random": RandomPolicy}[args.policy]
        return scripted(seed=args.seed, reasoning=False), None
    from textgym.models import load_model
    from textgym.policies.hf import HFPolicy

    model, tokenizer = load_model(args.model, dtype=args.dtype, device=args.device)
    stop = list(gym.make(ENV_ID).unwrapped.stop_strings)
    common = {"max_new_tokens": 16, "stop": stop, "batch_size": args.batch_size, "seed": args.seed}
    greedy = HFPolicy(model, tokenizer, temperature=0.0, **common)
    sampled = HFPolicy(model, tokenizer, temperature=args.temperature, **common)
    return greedy, sampled if args.explore_samples else None


@dataclass
class Config:
    """The command line of this script."""

    model: str | None = None
    """A model name or (adapter) directory; give this or --policy."""
    policy: Literal["minimax", "random"] | None = None
    """A scripted policy; give this or --model."""
    exam_set: Literal["critical", "games"] = "critical"
    """The positions of the exam (see the module docstring)."""
    games: int = 4000
    """With --exam-set games: the safe expert's games per mark."""
    marks: tuple[Literal["X", "O"], ...] = ("X", "O")
    """The marks examined, one exam each."""
    explore_samples: int = 0
    """Samples of the model in each position its greedy move gets wrong (needs --model)."""
    temperature: float = 1.0
    """Temperature of those samples."""
    prompt_style: Literal["full", "compact"] = "compact"
    """The env's prompts."""
    dtype: str = "float32"
    """The dtype of the model's weights."""
    device: str | None = None
    """The model's device (None: where load_model puts it)."""
    batch_size: int = 64
    """Positions played together (the policy's batch)."""
    seed: int = 0
    """Seed of the policies and of the games."""
    output: str = "exam.json"
    """JSON path."""

    def __post_init__(self) -> None:
        if (self.model is None) == (self.policy is None):
            given = "neither" if self.model is None else "both"
            raise ValueError(f"expected one of --model or --policy, got {given}")
        if self.explore_samples and self.model is None:
            raise ValueError("--explore-samples samples a model: give --model")


def main(argv: list[str] | None = None) -> int:
    args = script_config(Config, argv, "tictactoe_exam.py", __doc__)
    greedy, sampled = _policies(args)
    results: dict[str, Any] = {"settings": asdict(args)}
    for mark in args.marks:
        if args.exam_set == "critical":
            positions = critical_exam_positions(mark, args.prompt_style)
        else:
            positions = game_exam_positions(args.games, mark, args.prompt_style, args.seed)
        result = take_exam(greedy, positions, args.batch_size)
        line = f"{mark}: {result['positions']} positions, safe {result['safe']['rate']:.1%}, "
        line += f"best {result['best']['rate']:.1%}, invalid {result['invalid']['rate']:.1%}"
        if sampled is not None:
            unsafe = result["unsafe"]
            result["explore"] = explore_unsafe(
                sampled, positions, unsafe, args.explore_samples, args.batch_size
            )
            e = result["explore"]
            line += f"; explore: mean p(safe) {e['mean_p_safe']:.3f}, never safe "
            line += f"{e['never_safe']}, P(a group of 8 holds a safe move) "
            line += f"{e['group_of_8_has_safe']:.3f}"
        print(line, flush=True)
        results[mark] = result
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
