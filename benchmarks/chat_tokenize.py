"""Chat tokenization time per conversation: :class:`~textgym.tokens.ChatTokenizer` of this tree
against the one of an earlier commit (``--before``), side by side in one process.

What is timed: :func:`textgym.algos.sft_data.conversation_tokens` (what ``textgym sft`` runs on
every record, and the same ``prompt`` / ``continuation`` / ``assistant_ids`` calls a token-level
multi-turn rollout makes each turn) over ``--episodes`` tic-tac-toe conversations played by
:class:`~textgym.policies.scripted.RandomPolicy`, with the model's tokenizer. Each round builds a
fresh ``ChatTokenizer`` of each version (its first-use costs are counted) and alternates which
runs first; the 1-minute load average is recorded before each round. The earlier version is
``textgym/tokens.py`` at ``--before`` (``git show``), loaded as a module beside this tree's; the
two must give identical ids and masks (checked, recorded as ``identical``).

``--rollout-episodes N`` also times what the change does to a rollout: ``N`` tic-tac-toe
episodes played greedily by :class:`~textgym.policies.hf.HFPolicy` (``--model``'s weights,
bfloat16 where the CPU computes it natively, else float32; batch ``--rollout-batch-size``) with
its ``ChatTokenizer`` of one version, then of the other, alternating per round; the
trajectories' token ids must be identical too.

Usage::

    python benchmarks/chat_tokenize.py --before HEAD~1 --model gemma-3-270m
    python benchmarks/chat_tokenize.py --before HEAD~2 --rollout-episodes 64 --rounds 3
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from _provenance import REPO_ROOT, dist_version, git, git_dirty, machine_info, write_result

import textgym  # noqa: F401  (registers textgym/* ids)
from textgym.algos.sft_data import conversation_tokens
from textgym.cli.usage import fail, script_config
from textgym.models import load_model
from textgym.policies.hf import HFPolicy
from textgym.policies.scripted import RandomPolicy
from textgym.rollout import rollout
from textgym.tokens import ChatTokenizer


@dataclasses.dataclass
class Config:
    """The command line of this benchmark."""

    before: str
    """The earlier commit whose textgym/tokens.py is timed beside this tree's."""
    model: str = "gemma-3-270m"
    """The model whose tokenizer and chat template are used."""
    episodes: int = 200
    """Tic-tac-toe conversations tokenized per version and round."""
    rounds: int = 5
    """Timed rounds per version, alternating which version goes first."""
    rollout_episodes: int = 0
    """Also time rollouts of this many episodes with each version (0: no rollouts)."""
    rollout_batch_size: int = 64
    """Episodes played together in the rollouts."""
    output: str = str(REPO_ROOT / "benchmarks" / "results" / "chat_tokenize_cpu.json")
    """The JSON record."""

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.rounds < 1 or self.rollout_batch_size < 1:
            raise ValueError("--episodes, --rounds and --rollout-batch-size must be at least 1")
        if self.rollout_episodes < 0:
            raise ValueError(f"--rollout-episodes must be >= 0, got {self.rollout_episodes}")


def _old_chat_tokenizer(rev: str) -> type:
    """``ChatTokenizer`` of ``textgym/tokens.py`` at commit ``rev``."""
    source = git("show", f"{rev}:textgym/tokens.py")
    if source is None:
        fail(f"--before {rev!r}: no textgym/tokens.py at that revision of this repository")
    path = Path(tempfile.mkdtemp(prefix="chat_tokenize_")) / "tokens_before.py"
    path.write_text(source + "\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("tokens_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tokens_before"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.ChatTokenizer


def _play(policy: Any, episodes: int, batch_size: int) -> list[Any]:
    """Tic-tac-toe episodes (compact prompts, either mark) of ``policy``, seeds 0.."""
    env_kwargs = {"prompt_style": "compact", "agent_mark": "random"}
    make = lambda: gym.make("textgym/TicTacToe-v0", **env_kwargs)  # noqa: E731
    return rollout(make, policy, list(range(episodes)), batch_size=min(episodes, batch_size))


def _rollouts(args: Config, versions: dict[str, type], model: Any, tokenizer: Any) -> Any:
    """Seconds per round and version of ``--rollout-episodes`` greedy episodes, and whether
    both versions played the same token ids."""
    policy = HFPolicy(model, tokenizer, max_new_tokens=16, temperature=0.0, stop=["</move>"])
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    played: dict[str, list[Any]] = {}
    _play(policy, min(args.rollout_batch_size, args.rollout_episodes), args.rollout_batch_size)
    for round_ in range(args.rounds):
        for version in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
            policy.chat_tokenizer = versions[version](tokenizer)
            began = time.perf_counter()
            trajectories = _play(policy, args.rollout_episodes, args.rollout_batch_size)
            seconds[version].append(time.perf_counter() - began)
            played[version] = [t.token_ids for t in trajectories]
    return seconds, played["before"] == played["after"]


def _summary(seconds: dict[str, list[float]], items: int) -> dict[str, Any]:
    return {
        version: {
            "seconds": times,
            "median_s": statistics.median(times),
            "min_s": min(times),
            "max_s": max(times),
            "ms_each": 1000 * statistics.median(times) / items,
        }
        for version, times in seconds.items()
    }


def _timed(chat_class: type, tokenizer: Any, conversations: Sequence[Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    chat = chat_class(tokenizer)
    tokens = [conversation_tokens(chat, messages) for messages in conversations]
    return time.perf_counter() - began, tokens


def main(argv: Sequence[str] | None = None) -> None:
    args = script_config(Config, argv, "chat_tokenize.py", __doc__)
    versions = {"before": _old_chat_tokenizer(args.before), "after": ChatTokenizer}
    model, tokenizer = load_model(
        args.model, dtype="auto", random_weights=not args.rollout_episodes
    )
    conversations = [t.messages for t in _play(RandomPolicy(seed=0), args.episodes, 64)]
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    loads, outputs = [], {}
    for round_ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
        for version in order:
            elapsed, outputs[version] = _timed(versions[version], tokenizer, conversations)
            seconds[version].append(elapsed)
    summary = _summary(seconds, len(conversations))
    rollouts = None
    if args.rollout_episodes:
        timed, same = _rollouts(args, versions, model, tokenizer)
        rollouts = {
            "dtype": str(next(model.parameters()).dtype),
            "identical_token_ids": same,
            "speedup_median_before_over_after": statistics.median(timed["before"])
            / statistics.median(timed["after"]),
            "modes": _summary(timed, args.rollout_episodes),
        }
    record = {
        "benchmark": "chat_tokenize",
        "commit": git("rev-parse", "HEAD"),
        "dirty": git_dirty(),
        "before_commit": git("rev-parse", args.before),
        "versions": {p: dist_version(p) for p in ("transformers", "tokenizers")},
        "machine": machine_info(),
        "settings": dataclasses.asdict(args) | {"task": "textgym/TicTacToe-v0, compact"},
        "conversations": len(conversations),
        "turns_mean": statistics.fmean(len(m) for m in conversations) / 2,
        "identical": outputs["before"] == outputs["after"],
        "load_avg_1m_before_each_round": loads,
        "speedup_median_before_over_after": summary["before"]["median_s"]
        / summary["after"]["median_s"],
        "modes": summary,
        "rollouts": rollouts,
    }
    write_result(args.output, record)
    for version, entry in summary.items():
        print(
            f"{version:6s} {entry['median_s']:.2f} s [{entry['min_s']:.2f}-{entry['max_s']:.2f}] "
            f"for {len(conversations)} conversations: {entry['ms_each']:.1f} ms each"
        )
    print(
        f"speed-up {record['speedup_median_before_over_after']:.1f}x, "
        f"identical: {record['identical']}"
    )
    for version, entry in (rollouts or {}).get("modes", {}).items():
        print(
            f"rollout {version:6s} {entry['median_s']:.2f} s "
            f"[{entry['min_s']:.2f}-{entry['max_s']:.2f}] for {args.rollout_episodes} episodes"
        )


if __name__ == "__main__":
    main()
