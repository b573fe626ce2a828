"""The positions where a policy's own games go wrong (the blunders stage of
recipes/tictactoe_o_seat.toml): ``python recipes/tictactoe_blunders.py EVAL_DIR [EVAL_DIR ...]``.

Replays every game of each ``textgym eval --output-dir`` folder (TicTacToe-v0, its
``summary.json``'s env kwargs and each trajectory's seed and actions) and keeps each position
where the agent's move did not keep the game's value
(:func:`~textgym.envs.tictactoe.opponent.value_preserving_moves`): a drawn position turned into
a lost one, or a won one into a draw. Writes their boards, the most frequent first, to
``blunders.json`` in the current folder (a list for TicTacToe-v0's ``start_boards``) and prints
each with how often it was met and how many games it lost. ``blunder_games.json`` holds the
games that reached them: each game's cells up to its first blunder, the most frequent first
(``start_boards`` move lists: the position with the conversation that led to it, as the policy
met it in play).

Unlike the position exam (every critical position, weighted alike), these are the positions the
policy reaches against the opponents it is evaluated on, weighted as it meets them: a few
positions can hold most of its losses.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import gymnasium as gym

import textgym  # noqa: F401  (registers the env ids)
from textgym.envs.tictactoe.opponent import value_preserving_moves


def game_blunders(env: gym.Env, record: dict) -> list[tuple[str, int, tuple[int, ...]]]:
    """``(board, move, moves)`` of each move of the agent in ``record`` (an eval trajectory)
    that lost value, replayed on ``env`` from the record's seed; ``moves`` are the game's
    cells before it, in play order."""
    _, info = env.reset(seed=record["seed"])
    base = env.unwrapped
    found, moves = [], [info["opponent_move"]] if info["opponent_move"] is not None else []
    for message in record["messages"]:
        if message["role"] != "assistant":
            continue
        board = base.board
        _, _, terminated, truncated, info = env.step(message["content"])
        move = info.get("agent_move")
        if move is not None and move not in value_preserving_moves(board):
            found.append((board, move, tuple(moves)))
        moves += [cell for cell in (move, info["opponent_move"]) if cell is not None]
        if terminated or truncated:
            break
    return found


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python tictactoe_blunders.py EVAL_DIR [EVAL_DIR ...]", file=sys.stderr)
        return 2
    met, lost, games = Counter(), Counter(), Counter()
    for folder in map(Path, argv):
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        if summary["env_id"] != "textgym/TicTacToe-v0":
            print(f"tictactoe_blunders: {folder} is not a TicTacToe-v0 eval", file=sys.stderr)
            return 2
        env = gym.make(summary["env_id"], **summary["env_kwargs"])
        with (folder / "trajectories.jsonl").open(encoding="utf-8") as lines:
            for record in map(json.loads, lines):
                blunders = game_blunders(env, record)
                met.update(board for board, _, _ in blunders)
                if blunders:
                    games[blunders[0][2]] += 1
                if record["outcome"] == "loss" and blunders:
                    lost[blunders[0][0]] += 1  # the first blunder decided the game
        env.close()
    if not met:
        print("tictactoe_blunders: no move lost value in these games", file=sys.stderr)
        return 2
    boards = [board for board, _ in met.most_common()]
    Path("blunders.json").write_text(json.dumps(boards) + "\n", encoding="utf-8")
    prefixes = [list(moves) for moves, _ in games.most_common()]
    Path("blunder_games.json").write_text(json.dumps(prefixes) + "\n", encoding="utf-8")
    for board in boards:
        print(f"{board}  met {met[board]}, lost {lost[board]}")
    print(f"blunders.json: {len(boards)} boards; blunder_games.json: {len(prefixes)} games")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
