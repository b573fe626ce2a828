"""Evaluate a tic-tac-toe policy against every opponent the mastery claim needs (issue 23).

One command plays ``--games`` games per row (default 1,000) with each mark (X moves first, O
second, reported separately) against:

- ``random``: a uniformly random opponent;
- ``optimal``: the env's minimax opponent (uniform among its optimal moves);
- ``minimax p=0.25 / 0.5 / 0.75``: that opponent with ``random_move_prob`` 0.25, 0.5, 0.75 (the
  training curriculum's range);
- the opponents outside the training distribution (``TicTacToe-v0``'s ``opponent`` styles):
  ``minimax_last`` and ``minimax_any`` (optimal, other tie-breaks), ``fork`` (Crowley &
  Siegler's rules, never loses), ``greedy_center`` and ``greedy_edge`` (win/block players that
  a fork beats);
- with ``--selfplay-against PATH ...``, other models (earlier checkpoints of the policy): rows
  ``selfplay:PATH`` played through the PettingZoo twin, the other model sampled at
  ``--selfplay-temperature`` (no exact references).

Each row gives win / draw / loss rates with binomial standard errors, the invalid-move rate
(invalid actions / actions), the share of games with any and the first 50 of them with the
position each answered (``invalid_moves``), the number of distinct games
(greedy play against a nearly deterministic opponent repeats a few lines), and two exact
references from :mod:`textgym.envs.tictactoe.analysis` (no sampling): what the scripted minimax
player (uniform among optimal moves) scores against that opponent, and the best any player can
score (expectimax on the expected outcome reward). ``--ceilings PATH`` writes the ceiling table alone.

``--positions`` adds the position exam: every position the safe expert
(:func:`~textgym.envs.tictactoe.opponent.safe_best_moves`) meets in ``--positions-games`` games
per mark against opponents of every strength (``random_move_prob`` stratified over [0, 1]),
each shown once, in the conversation of the first game that reached it; the policy's move
there is ``safe`` if it keeps the game's result (it can still draw or win against perfect
play, :func:`~textgym.envs.tictactoe.opponent.value_preserving_moves`) and ``best`` if it is
also a safe expert's move. Passing it is necessary for never losing, not sufficient: a policy
that plays other safe moves than the expert's reaches positions the exam does not hold. It says
where a policy that loses goes wrong, without an opponent's sampling in between (unsafe moves
are counted by the number of marks on the board and listed). ``--exam-set critical`` holds
instead every critical position with the mark to move
(:func:`~textgym.envs.tictactoe.opponent.critical_positions`: 1,732 for X, 1,459 for O), each
shown as an episode's start state (``reset(options={"board": ...})``), the positions RL starts
from. ``--explore-samples K`` (with ``--decoding greedy sampled``) then samples the policy K
times at ``--temperature`` in each position its greedy move gets wrong and records how often
a safe move comes up: whether a GRPO group of 8 started there can contain a game that differs,
the only way RL can correct that move.

Policies: ``--policy minimax`` or ``random`` (scripted, fast), or ``--model PATH`` (a local
model or LoRA adapter directory, ``textgym.models.load_model``) played greedily and/or sampled
(``--decoding greedy sampled``). The JSON records the commit, the machine, the seed and every
argument (``benchmarks/_provenance.py``).

Examples::

    python benchmarks/tictactoe_eval.py --policy minimax \\
        --output benchmarks/results/tictactoe_eval_minimax.json --update-results
    python benchmarks/tictactoe_eval.py --model path/to/adapter --decoding greedy \\
        --games 200 --dtype bfloat16 --output runs/tictactoe_eval_model.json
    python benchmarks/tictactoe_eval.py --ceilings runs/tictactoe_ceilings.json

``--output`` and ``--ceilings`` under ``benchmarks/results/`` need ``--update-results`` (it is
read-only without it); bad arguments are one ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from _provenance import git, git_dirty, machine_info, write_result  # sibling module of this script
from _study_outputs import (
    at_least,
    check_results_write,
    checked_device,
    one_line_errors,
    run_main,
)

import textgym  # noqa: F401
from textgym.checks import MAX_SEED
from textgym.envs.tictactoe import MinimaxPolicy
from textgym.envs.tictactoe.analysis import (
    best_response,
    ceilings,
    minimax_policy,
    opponent_policy,
    outcome_probabilities,
)
from textgym.envs.tictactoe.board import to_move
from textgym.envs.tictactoe.env import OPPONENTS
from textgym.envs.tictactoe.opponent import (
    critical_positions,
    safe_best_moves,
    value_preserving_moves,
)
from textgym.envs.tictactoe.parsing import parse_move
from textgym.evaluation import OUTCOMES
from textgym.models import DTYPE_NAMES
from textgym.policies import RandomPolicy
from textgym.results import write_json
from textgym.rollout import Trajectory, rollout

ENV_ID = "textgym/TicTacToe-v0"
MARKS = ("X", "O")

#: Row name -> (opponent style, random_move_prob as an exact decimal string).
ROWS: dict[str, tuple[str, str]] = {
    "random": ("random", "1"),
    "optimal": ("minimax", "0"),
    "minimax p=0.25": ("minimax", "0.25"),
    "minimax p=0.5": ("minimax", "0.5"),
    "minimax p=0.75": ("minimax", "0.75"),
    **{style: (style, "0") for style in OPPONENTS if style not in ("minimax", "random")},
}

SCRIPTED: dict[str, Callable[..., Any]] = {"minimax": MinimaxPolicy, "random": RandomPolicy}


def rate(hits: int, n: int) -> dict[str, float]:
    """``{"rate": hits / n, "stderr": sqrt(p (1 - p) / n)}`` (binomial; NaN for ``n == 0``)."""
    p = hits / n if n else math.nan
    return {"rate": p, "stderr": math.sqrt(p * (1 - p) / n) if n else math.nan}


def game_rates(games: list[Trajectory]) -> dict[str, Any]:
    """W/D/L and invalid-move rates of finished games, each with its standard error, and the
    number of distinct games (message sequences): a deterministic policy against an opponent
    with few candidate moves replays the same few games, and its standard errors then describe
    those lines, not a sample of play."""
    actions = sum(g.num_steps for g in games)
    invalid = sum(sum(g.invalid_actions) for g in games)
    return {
        **{o: rate(sum(g.outcome == o for g in games), len(games)) for o in OUTCOMES},
        "truncated": rate(sum(g.outcome is None for g in games), len(games)),
        "invalid_action": rate(invalid, actions),
        "invalid_game": rate(sum(any(g.invalid_actions) for g in games), len(games)),
        "games": len(games),
        "distinct_games": len({tuple(m["content"] for m in g.messages) for g in games}),
        "actions": actions,
    }


def invalid_move_trace(games: list[Trajectory], limit: int = 50) -> list[dict[str, Any]]:
    """The first ``limit`` invalid moves of ``games``, game by game (issue 34's trace).

    Each entry: the game's ``seed``, the move's index among the policy's moves (``step``, from
    0), the ``observation`` it answered (the user message before it: the board and the legal
    moves), its ``completion`` and the env's ``reply`` (the next user message, ``None`` at the
    end). Replaying ``seed`` with the same policy seed reproduces the game.
    """
    trace: list[dict[str, Any]] = []
    for game in games:
        turns = [i for i, m in enumerate(game.messages) if m["role"] == "assistant"]
        for step, invalid in enumerate(game.invalid_actions):
            if not invalid or step >= len(turns):
                continue
            i = turns[step]
            after = game.messages[i + 1] if i + 1 < len(game.messages) else None
            trace.append(
                {
                    "seed": game.seed,
                    "step": step,
                    "observation": game.messages[i - 1]["content"],
                    "completion": game.messages[i]["content"],
                    "reply": after["content"] if after and after["role"] == "user" else None,
                }
            )
            if len(trace) == limit:
                return trace
    return trace


def exact_references(mark: str, style: str, prob: str) -> dict[str, dict[str, float | str]]:
    """The scripted minimax player's and the best player's exact W/D/L against one opponent."""
    opponent = opponent_policy(style, prob)
    return {
        "minimax_player": outcome_probabilities(mark, minimax_policy, opponent).as_dict(),
        "best_player": best_response(mark, opponent, "score").as_dict(),
    }


def _model_policies(
    args: argparse.Namespace, path: str, temperatures: dict[str, float], seed: int
) -> dict[str, Any]:
    """``{label: HFPolicy}`` of the model at ``path``, loaded once, one policy per temperature,
    with this run's dtype, device, token limit, batch size and the env's stop strings."""
    from textgym.models import load_model  # torch/transformers only for a model
    from textgym.policies.hf import HFPolicy

    model, tokenizer = load_model(path, dtype=args.dtype, device=args.device)
    stop = list(gym.make(ENV_ID).unwrapped.stop_strings)
    return {
        label: HFPolicy(
            model,
            tokenizer,
            max_new_tokens=args.max_new_tokens,
            temperature=temperature,
            stop=stop,
            batch_size=args.batch_size,
            seed=seed,
        )
        for label, temperature in temperatures.items()
    }


def build_policies(args: argparse.Namespace) -> dict[str, Any]:
    """``{decoding label: policy}``: one scripted policy, or the model once per decoding."""
    if args.model is None:
        return {"scripted": SCRIPTED[args.policy](seed=args.seed, reasoning=False)}
    temperatures = {"greedy": 0.0, "sampled": args.temperature}
    return _model_policies(
        args, args.model, {mode: temperatures[mode] for mode in args.decoding}, args.seed
    )


class _FirstVisits:
    """A policy that plays the safe expert and keeps the first conversation (and info) that
    reached each board."""

    name = "first_visits"
    tokens_generated = None

    def __init__(self) -> None:
        self.expert = MinimaxPolicy(reasoning=False, style="safe_best", tie_break="first")
        self.visits: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}

    def act(self, conversations: Any, infos: Any) -> Any:
        for conversation, info in zip(conversations, infos, strict=True):
            self.visits.setdefault(info["board"], ([dict(m) for m in conversation], dict(info)))
        return self.expert.act(conversations, infos)


def exam_positions(
    games: int, mark: str, prompt_style: str, seed: int = 0
) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """The position exam's ``(conversation, info)`` pairs for ``mark``, one per board, sorted
    by board (see the module docstring)."""
    visitor, strata = _FirstVisits(), 10
    for k in range(strata):
        kwargs = {
            "random_move_prob": (k + 0.5) / strata,
            "agent_mark": mark,
            "prompt_style": prompt_style,
        }
        rollout(
            lambda kwargs=kwargs: gym.make(ENV_ID, **kwargs),
            visitor,
            range(seed * 10**6 + k, seed * 10**6 + games, strata),
            batch_size=64,
        )
    return [visitor.visits[board] for board in sorted(visitor.visits)]


class _StartStates:
    """A policy that keeps each episode's first conversation (and info), keyed by its start
    board, and then plays the safe expert."""

    name = "start_states"
    tokens_generated = None

    def __init__(self) -> None:
        self.expert = MinimaxPolicy(reasoning=False, style="safe_best", tie_break="first")
        self.first: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}

    def act(self, conversations: Any, infos: Any) -> Any:
        for conversation, info in zip(conversations, infos, strict=True):
            if len(conversation) <= 2:  # the system prompt and the start position only
                self.first.setdefault(info["board"], ([dict(m) for m in conversation], dict(info)))
        return self.expert.act(conversations, infos)


def critical_exam_positions(
    mark: str, prompt_style: str
) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Every critical position with ``mark`` to move, as the ``(conversation, info)`` of an
    episode started there, sorted by board (``--exam-set critical``)."""
    boards = [b for b in critical_positions() if to_move(b) == mark]
    keeper = _StartStates()
    rollout(
        lambda: gym.make(ENV_ID, prompt_style=prompt_style),
        keeper,
        [0] * len(boards),
        batch_size=64,
        options=[{"board": b} for b in boards],
    )
    return [keeper.first[b] for b in boards]


def explore_unsafe(
    policy: Any,
    positions: list[tuple[list[dict[str, Any]], dict[str, Any]]],
    unsafe: list[dict[str, Any]],
    samples: int,
    batch_size: int,
) -> dict[str, Any]:
    """Sample ``policy`` ``samples`` times in each position of ``unsafe`` (``take_exam``'s
    list) and count the safe moves: per position ``p_safe`` (safe samples / samples), and
    over positions the mean ``p_safe``, the number with no safe sample, and the mean chance
    that a group of 8 samples holds at least one safe move, ``1 - (1 - p_safe) ** 8``."""
    by_board = {info["board"]: (conversation, info) for conversation, info in positions}
    wanted = [by_board[u["board"]] for u in unsafe for _ in range(samples)]
    moves: list[int | None] = []
    for start in range(0, len(wanted), batch_size):
        chunk = wanted[start : start + batch_size]
        completions = policy.act([c for c, _ in chunk], [i for _, i in chunk])
        moves += [parse_move(c.text) for c in completions]
    for k, u in enumerate(unsafe):
        drawn = moves[k * samples : (k + 1) * samples]
        u["p_safe"] = sum(m in u["safe"] for m in drawn) / samples
        u["sampled_moves"] = {str(m): drawn.count(m) for m in sorted(set(drawn), key=str)}
    n = len(unsafe)
    p = [u["p_safe"] for u in unsafe]
    return {
        "samples": samples,
        "positions": n,
        "mean_p_safe": sum(p) / n if n else math.nan,
        "never_safe": sum(x == 0 for x in p),
        "group_of_8_has_safe": sum(1 - (1 - x) ** 8 for x in p) / n if n else math.nan,
    }


def take_exam(
    policy: Any, positions: list[tuple[list[dict[str, Any]], dict[str, Any]]], batch_size: int
) -> dict[str, Any]:
    """The policy's move in each exam position: rates of safe, best and invalid moves (each
    with its binomial standard error over positions), the unsafe moves counted by the number
    of marks on the board, and each unsafe move (board, move or ``None``, the safe moves)."""
    moves: list[int | None] = []
    for start in range(0, len(positions), batch_size):
        chunk = positions[start : start + batch_size]
        completions = policy.act([c for c, _ in chunk], [i for _, i in chunk])
        moves += [parse_move(c.text) for c in completions]
    safe = best = invalid = 0
    unsafe_by_marks: dict[int, int] = {}
    unsafe: list[dict[str, Any]] = []
    for (_, info), move in zip(positions, moves, strict=True):
        board = info["board"]
        invalid += move not in info["legal_moves"]
        best += move in safe_best_moves(board)
        if move in value_preserving_moves(board):
            safe += 1
        else:
            marks = 9 - board.count(".")
            unsafe_by_marks[marks] = unsafe_by_marks.get(marks, 0) + 1
            unsafe.append({"board": board, "move": move, "safe": value_preserving_moves(board)})
    n = len(positions)
    return {
        "positions": n,
        "safe": rate(safe, n),
        "best": rate(best, n),
        "invalid": rate(invalid, n),
        "unsafe_by_marks": dict(sorted(unsafe_by_marks.items())),
        "unsafe": unsafe,
    }


def play_exam(args: argparse.Namespace, policies: dict[str, Any]) -> dict[str, Any]:
    """``{decoding: {mark: take_exam result}}`` for ``--positions``."""
    results: dict[str, Any] = {}
    for mark in args.marks:
        if args.exam_set == "critical":
            positions = critical_exam_positions(mark, args.prompt_style)
        else:
            positions = exam_positions(args.positions_games, mark, args.prompt_style, args.seed)
        for mode, policy in policies.items():
            start = time.perf_counter()
            result = take_exam(policy, positions, args.batch_size)
            if mode == "greedy" and args.explore_samples:
                result["explore"] = explore_unsafe(
                    policies["sampled"],
                    positions,
                    result["unsafe"],
                    args.explore_samples,
                    args.batch_size,
                )
            result["seconds"] = time.perf_counter() - start
            results.setdefault(mode, {})[mark] = result
            print(
                f"exam {mode:9} {mark}: {result['positions']} positions, safe "
                f"{_pct(result['safe'])} %, best {_pct(result['best'])} %, invalid "
                f"{_pct(result['invalid'])} %, unsafe by marks on board "
                f"{result['unsafe_by_marks']}",
                flush=True,
            )
            if "explore" in result:
                e = result["explore"]
                print(
                    f"  explore T={args.temperature}: {e['positions']} unsafe positions x "
                    f"{e['samples']} samples, mean p(safe) {e['mean_p_safe']:.3f}, never safe "
                    f"{e['never_safe']}, P(a group of 8 holds a safe move) "
                    f"{e['group_of_8_has_safe']:.3f}",
                    flush=True,
                )
    return results


def play_rows(
    args: argparse.Namespace,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    policies: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Play every (decoding, row, mark) and return ``{decoding: {row: {mark: result}}}``.

    ``on_row`` is called with the results so far after each (decoding, row, mark); the
    policies are built from ``args`` unless given.
    """
    policies = build_policies(args) if policies is None else policies
    seeds = range(args.seed * 10**6, args.seed * 10**6 + args.games)
    results: dict[str, Any] = {}
    for mode, policy in policies.items():
        results[mode] = {}
        for row in args.rows:
            style, prob = ROWS[row]
            results[mode][row] = {}
            for mark in args.marks:
                kwargs = {
                    "opponent": style,
                    "random_move_prob": float(prob),
                    "agent_mark": mark,
                    "prompt_style": args.prompt_style,
                }
                start = time.perf_counter()
                games = rollout(
                    lambda kwargs=kwargs: gym.make(ENV_ID, **kwargs),
                    policy,
                    seeds,
                    batch_size=args.batch_size,
                )
                if hasattr(policy, "clear_cache"):
                    policy.clear_cache()
                result = {
                    **game_rates(games),
                    "invalid_moves": invalid_move_trace(games),
                    "exact": exact_references(mark, style, prob),
                    "seconds": time.perf_counter() - start,
                }
                results[mode][row][mark] = result
                print_row(mode, row, mark, result, flush=True)
                if on_row is not None:
                    on_row(results)
    return results


def build_opponent_models(args: argparse.Namespace) -> dict[str, Any]:
    """``{path: policy}`` for ``--selfplay-against``: each model sampled at
    ``--selfplay-temperature`` (above 0 its games vary; greedy against greedy replays one game a
    mark), its own sampling seed ``args.seed + 1``."""
    temperature = {"opponent": args.selfplay_temperature}
    opponents = {}
    for path in args.selfplay_against:
        opponents[path] = _model_policies(args, path, temperature, args.seed + 1)["opponent"]
    return opponents


def play_selfplay(
    args: argparse.Namespace,
    policies: dict[str, Any],
    opponents: dict[str, Any],
    results: dict[str, Any],
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Rows ``selfplay:PATH``: the policy against another model (an earlier checkpoint) through
    the PettingZoo twin (:func:`textgym.selfplay.selfplay`, the same ``--prompt-style`` for both
    seats), ``--games`` games with each of ``--marks``; added to ``results[mode]``."""
    from textgym.envs.tictactoe.pettingzoo_env import env as twin
    from textgym.selfplay import selfplay

    seeds = list(range(args.seed * 10**6, args.seed * 10**6 + args.games))
    for mode, policy in policies.items():
        for path, opponent in opponents.items():
            row = f"selfplay:{path}"
            results.setdefault(mode, {})[row] = {}
            for mark in args.marks:
                start = time.perf_counter()
                games = selfplay(
                    [policy, opponent],
                    seeds,
                    batch_size=args.batch_size,
                    first_player="player_0" if mark == "X" else "player_1",
                    make_env=lambda: twin(prompt_style=args.prompt_style),
                )
                ours = [g.trajectories["player_0"] for g in games]
                result = {
                    **game_rates(ours),
                    "invalid_moves": invalid_move_trace(ours),
                    "opponent_invalid_action": game_rates(
                        [g.trajectories["player_1"] for g in games]
                    )["invalid_action"],
                    "opponent_temperature": args.selfplay_temperature,
                    "seconds": time.perf_counter() - start,
                }
                results[mode][row][mark] = result
                print_row(mode, "selfplay", mark, result, flush=True)
                if on_row is not None:
                    on_row(results)


def _pct(r: dict[str, float]) -> str:
    return f"{100 * r['rate']:5.1f} ± {100 * r['stderr']:3.1f}"


def _exact(o: dict[str, Any]) -> str:
    return f"{100 * o['win']:5.1f} / {100 * o['draw']:5.1f} / {100 * o['loss']:4.1f}"


HEADER = (
    f"{'decoding':9} {'opponent':15} {'mark':4} | {'win %':>11} {'draw %':>11} {'loss %':>11}"
    f" | {'invalid %':>9} | {'lines':>5} | {'minimax player W/D/L %':>22}"
    f" | {'best player W/D/L %':>22}"
)


def print_row(mode: str, row: str, mark: str, r: dict[str, Any], *, flush: bool = False) -> None:
    """One line of the printed table."""
    print(
        f"{mode:9} {row:15} {mark:4} | {_pct(r['win'])} {_pct(r['draw'])} {_pct(r['loss'])}"
        f" | {100 * r['invalid_action']['rate']:9.2f} | {r['distinct_games']:5d}"
        f" | {_exact(r['exact']['minimax_player']) if 'exact' in r else '-':>22}"
        f" | {_exact(r['exact']['best_player']) if 'exact' in r else '-':>22}",
        flush=flush,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = one_line_errors(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--policy", choices=sorted(SCRIPTED), default="minimax", help="scripted")
    who.add_argument("--model", default=None, help="model name or (adapter) directory")
    parser.add_argument("--games", type=at_least(1), default=1000, help="games per row and mark")
    parser.add_argument(
        "--rows", nargs="*", choices=list(ROWS), default=list(ROWS), help="none: no games"
    )
    parser.add_argument("--positions", action="store_true", help="add the position exam")
    parser.add_argument(
        "--positions-games",
        type=at_least(1),
        default=4000,
        help="expert games that find the positions",
    )
    parser.add_argument(
        "--exam-set",
        choices=["expert", "critical"],
        default="expert",
        help="the exam's positions: the safe expert's (default) or every critical one",
    )
    parser.add_argument(
        "--explore-samples",
        type=at_least(0),
        default=0,
        help="samples at --temperature in each position the greedy move gets wrong",
    )
    parser.add_argument("--marks", nargs="+", choices=MARKS, default=list(MARKS))
    parser.add_argument(
        "--decoding", nargs="+", choices=["greedy", "sampled"], default=["greedy"], help="--model"
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="sampled decoding")
    parser.add_argument("--max-new-tokens", type=at_least(1), default=16)
    parser.add_argument("--prompt-style", choices=["full", "compact"], default="compact")
    parser.add_argument(
        "--dtype", default=None, choices=DTYPE_NAMES, help="model weights, e.g. bfloat16"
    )
    parser.add_argument("--device", default=None)
    parser.add_argument("--batch-size", type=at_least(1), default=64, help="games in flight")
    parser.add_argument(
        "--seed", type=at_least(0), default=0, help="episode seeds and policy sampling"
    )
    parser.add_argument("--output", default=None, help="JSON path")
    parser.add_argument("--ceilings", default=None, help="write only the ceiling table here")
    parser.add_argument(
        "--update-results",
        action="store_true",
        help="allow --output / --ceilings under benchmarks/results/ (read-only without it)",
    )
    parser.add_argument(
        "--selfplay-against",
        nargs="*",
        default=[],
        help="with --model: also play these models (earlier checkpoints) through the "
        "PettingZoo twin, one row each",
    )
    parser.add_argument(
        "--selfplay-temperature",
        type=float,
        default=1.0,
        help="the --selfplay-against models' sampling temperature (0: greedy)",
    )
    args = parser.parse_args(argv)
    for flag, value in (
        ("--temperature", args.temperature),
        ("--selfplay-temperature", args.selfplay_temperature),
    ):
        if not (math.isfinite(value) and value >= 0):
            parser.error(f"expected {flag} a finite number >= 0, got {value}")
    if args.seed > MAX_SEED:
        parser.error(f"expected --seed <= {MAX_SEED} (the seed range of every command)")
    if args.selfplay_against and args.model is None:
        parser.error("--selfplay-against plays a --model against other models")
    if args.explore_samples and not (
        args.positions and args.model and {"greedy", "sampled"} <= set(args.decoding)
    ):
        parser.error("--explore-samples needs --positions, --model and --decoding greedy sampled")
    for flag in ("--output", "--ceilings"):
        path = getattr(args, flag[2:])
        if path is not None:
            check_results_write(Path(path), flag, update_results=args.update_results)
    return args


def provenance(args: argparse.Namespace) -> dict[str, Any]:
    """Commit, whether tracked files differ from it, the machine, the arguments."""
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "machine": machine_info(),
        "seed": args.seed,
        "args": vars(args),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    checked_device(args.device)
    if args.ceilings:
        table = ceilings()
        for mark, rows in table.items():
            for name, o in rows.items():
                print(
                    f"{mark} {name:22} {_exact(o)}   ({o['win_exact']} / {o['draw_exact']} / {o['loss_exact']})"
                )
        write_result(args.ceilings, {**provenance(args), "ceilings": table})
        return 0
    record = provenance(args)
    record["policy"] = args.model or args.policy
    print(HEADER, flush=True)
    start = time.perf_counter()

    def save_partial(results: dict[str, Any]) -> None:
        # A run cut short keeps the rows it finished: "complete" says whether all were played.
        if args.output:
            partial = {**record, "results": results, "complete": False}
            write_json(Path(args.output), partial)  # atomic: a kill keeps the last whole one

    if args.output:  # before any game: a folder that cannot be made fails now, not after a row
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    policies = build_policies(args)
    if args.positions:
        record["positions"] = play_exam(args, policies)
        save_partial({})
    record["results"] = play_rows(args, save_partial, policies)
    if args.selfplay_against:
        opponents = build_opponent_models(args)
        play_selfplay(args, policies, opponents, record["results"], save_partial)
    record["complete"] = True
    record["seconds"] = time.perf_counter() - start
    if args.output:
        write_result(args.output, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
