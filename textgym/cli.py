"""The ``textgym`` command line: ``list``, ``eval``, ``collect`` and ``play``.

Bad arguments (unknown env id, malformed JSON, out-of-range values, a policy that cannot play
the env, an output path that cannot be written) print one line starting with
``textgym: error:`` and exit with code 2, like any argparse usage error; they are found before
anything is played. ``eval --output`` and ``collect`` write each episode as it finishes; a
Ctrl-C stops the run, keeps what was written (marked incomplete), prints one line and exits
with code 130.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import gymnasium as gym

import textgym
from textgym.evaluation import RunningSummary
from textgym.models import DTYPE_NAMES, MODEL_NAMES
from textgym.policies import POLICY_NAMES, Policy, make_policy
from textgym.policies.gold import GOLD_INFO_KEY
from textgym.results import check_dir, check_file, hold_interrupts, open_jsonl, write_json
from textgym.rollout import Trajectory, iter_rollout, rollout
from textgym.wrappers import REWARD_WRAPPERS

__all__ = ["main"]

_WRAPPERS: dict[str, Callable[[gym.Env], gym.Env]] = REWARD_WRAPPERS


_DEFAULT_MODEL = "gemma-3-270m"


class UsageError(Exception):
    """A bad command-line argument: reported in one line, exit code 2."""


def _fail(message: str) -> NoReturn:
    print(f"textgym: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _parse_env_kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--env-kwargs is not valid JSON ({exc.msg} at char {exc.pos}): {text!r}") from None
    except RecursionError:
        raise UsageError(f"--env-kwargs is nested too deeply to read ({len(text)} characters); "
                         "expected a JSON object of the env's keyword arguments") from None
    if not isinstance(value, dict):
        raise UsageError(f"--env-kwargs must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


def _env_factory(
    env_id: str, env_kwargs: dict[str, Any], wrappers: Sequence[str]
) -> tuple[Callable[[], gym.Env], gym.Env]:
    """Return a factory for the env and one env it built (to read attributes from, then close).

    Raises:
        UsageError: for an unknown id or wrapper, or kwargs the env rejects.
    """
    if env_id not in gym.registry or not env_id.startswith("textgym/"):
        known = ", ".join(sorted(textgym.ENV_DESCRIPTIONS))
        raise UsageError(f"unknown env id {env_id!r}; expected one of: {known}")
    for name in wrappers:
        if name not in _WRAPPERS:
            raise UsageError(f"unknown wrapper {name!r}; expected any of {', '.join(_WRAPPERS)}")

    def make() -> gym.Env:
        env = gym.make(env_id, **env_kwargs)
        for name in wrappers:
            env = _WRAPPERS[name](env)
        return env

    try:  # build one env now so that bad kwargs or data fail here, with the env's own message
        probe = make()
    except (ValueError, TypeError, OSError, ImportError, RecursionError) as exc:
        # OSError: a data file that is missing, a hub dataset that cannot be reached.
        raise UsageError(f"cannot make {env_id} with {_shown(env_kwargs)}"
                         + (f" and --wrappers {','.join(wrappers)}" if wrappers else "")
                         + f": {_one_line(exc)}") from None
    return make, probe


def _shown(env_kwargs: dict[str, Any]) -> str:
    """The kwargs as JSON for a message, or ``--env-kwargs`` when too long or deep to show."""
    try:
        text = json.dumps(env_kwargs)
    except (RecursionError, ValueError, TypeError):
        return "--env-kwargs"
    return text if len(text) <= 200 else "--env-kwargs"


def _one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception's message on one line, cut to ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _policy_kwargs(args: argparse.Namespace, stop: Sequence[str]) -> dict[str, Any]:
    if args.policy == "hf":
        return {
            "stop": list(stop),
            "model": args.model,
            "dtype": args.dtype,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "batch_size": args.batch_size,
            "seed": args.seed,
        }
    if args.policy == "openai":
        urls = [u.strip() for value in (args.base_url or []) for u in value.split(",") if u.strip()]
        return {
            "base_url": urls or "http://127.0.0.1:8000/v1",
            "model": None if args.model == _DEFAULT_MODEL else args.model,  # None: first served
            "max_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "seed": args.seed,
            "stop": list(stop),
        }
    if args.policy in ("random", "minimax"):
        return {"seed": args.seed, "reasoning": not args.no_reasoning}
    return {"seed": args.seed}


def _build_policy(name: str, kwargs: dict[str, Any]) -> Policy:
    try:
        return make_policy(name, **kwargs)
    except ImportError as exc:
        _fail(f"policy {name!r} needs optional dependencies: {exc}")
    except (ValueError, FileNotFoundError, OSError) as exc:
        raise UsageError(f"cannot build policy {name!r}: {exc}") from None


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['env_id']} · policy={summary['policy']}"
                  + (f" · model={summary['model']}" if summary["model"] else ""))
    table.add_column("metric")
    table.add_column("value", justify="right")
    ret, err = summary["mean_return"], summary["stderr_return"]
    table.add_row("episodes", str(summary["episodes"]))
    table.add_row("mean return", f"{ret:.4f}" if math.isnan(err) else f"{ret:.4f} ± {err:.4f}")
    for name, value in summary["reward_components"].items():
        table.add_row(f"  component {name}", f"{value:.4f}")
    if any(v for v in summary["outcomes"].values()):
        for outcome, rate in summary["outcomes"].items():
            table.add_row(outcome, f"{rate:.1%}")
    table.add_row("truncated (time limit)", f"{summary['truncated_rate']:.1%}")
    table.add_row("invalid actions", f"{summary['invalid_action_rate']:.1%}")
    table.add_row("episodes with an invalid action", f"{summary['invalid_episode_rate']:.1%}")
    table.add_row("mean turns", f"{summary['mean_turns']:.2f}")
    table.add_row("episodes / s", f"{summary['episodes_per_s']:.2f}")
    if summary.get("tokens_per_s") is not None:
        table.add_row("generated tokens / s", f"{summary['tokens_per_s']:.1f}")
    table.add_row("elapsed", f"{summary['elapsed_s']:.1f} s")
    Console().print(table)


def cmd_list(args: argparse.Namespace) -> int:
    width = max(len(i) for i in textgym.ENV_DESCRIPTIONS)
    for env_id, description in textgym.ENV_DESCRIPTIONS.items():
        print(f"{env_id:<{width}}  {description}")
    return 0


class _GroupSeeds(Sequence[int]):
    """Episode ``i``'s seed, ``first + i // group_size`` (GRPO-style groups of copies sharing
    one seed), computed when asked: no list of seeds, however many episodes."""

    def __init__(self, first: int, episodes: int, group_size: int):
        self.first, self.episodes, self.group_size = first, episodes, group_size

    def __len__(self) -> int:
        return self.episodes

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.episodes))]
        if not -self.episodes <= index < self.episodes:
            raise IndexError(f"episode {index} of {self.episodes}")
        return self.first + (index % self.episodes) // self.group_size


@dataclasses.dataclass
class _Setup:
    """What ``eval`` and ``collect`` play, checked before anything is played."""

    make_env: Callable[[], gym.Env]
    env_kwargs: dict[str, Any]
    wrappers: list[str]
    stop: tuple[str, ...]  # where a completion may end (the env's stop strings)


#: The ``info`` key each scripted policy plays from, and which envs give it.
_POLICY_NEEDS: dict[str, tuple[str, str]] = {
    "gold": (GOLD_INFO_KEY, ("only envs with a reference solution give (textgym/GSM8K-v0, "
                             "ReverseText-v0, Workplace-v0, EmailToolUse-v0)")),
    "minimax": ("board", "only textgym/TicTacToe-v0 gives"),
    "random": ("board", "only textgym/TicTacToe-v0 gives"),
}


def _setup(args: argparse.Namespace) -> _Setup:
    """Check ``eval``/``collect``'s arguments, the env, and that the policy can play it.

    Raises:
        UsageError: for a bad count or seed, an env that cannot be made, or a scripted
            policy that needs an ``info`` key the env does not give.
    """
    if not 1 <= args.episodes <= sys.maxsize:
        raise UsageError(f"--episodes must be in [1, {sys.maxsize}], got {args.episodes}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.group_size < 1 or args.episodes % args.group_size:
        raise UsageError(
            f"--episodes {args.episodes} is not a multiple of --group-size {args.group_size}; "
            "use a multiple of the group size"
        )
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0 (episode seeds are non-negative), got {args.seed}")
    env_kwargs = _parse_env_kwargs(args.env_kwargs)
    wrappers = [w for w in args.wrappers.split(",") if w] if args.wrappers else []
    make_env, probe = _env_factory(args.env_id, env_kwargs, wrappers)
    try:
        stop = tuple(getattr(probe.unwrapped, "stop_strings", ()))
        _, info = probe.reset(seed=args.seed)
    finally:
        probe.close()
    if args.policy in _POLICY_NEEDS and _POLICY_NEEDS[args.policy][0] not in info:
        key, who = _POLICY_NEEDS[args.policy]
        fits = [p for p in POLICY_NAMES
                if p != "human" and (p not in _POLICY_NEEDS or _POLICY_NEEDS[p][0] in info)]
        raise UsageError(f"--policy {args.policy} cannot play {args.env_id}: it plays from "
                         f"info[{key!r}], which {who}; use --policy {', '.join(fits[:-1])} or "
                         f"{fits[-1]}")
    return _Setup(make_env, env_kwargs, wrappers, stop)


def _checked_output(check: Callable[[Path, str], None], path: Path) -> Path:
    """``path`` after ``check`` (creates what it needs); its ValueError as a UsageError."""
    try:
        check(path, "--output")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return path


def _play(args: argparse.Namespace, setup: _Setup, policy: Policy, description: str,
          keep: Callable[[Trajectory], None]) -> tuple[float, bool]:
    """Play ``args.episodes`` episodes; ``keep`` each finished one, in episode (seed) order.

    An episode that finishes before an earlier one is held back until that one is kept. A
    Ctrl-C stops the play; the episodes finished by then, held back or not, are all kept.
    ``keep`` runs with Ctrl-C held back (:func:`~textgym.results.hold_interrupts`), so it
    never stops half way.

    Returns:
        ``(elapsed seconds, whether every episode was played)``.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    held: dict[int, Trajectory] = {}
    next_index = 0
    complete = True
    start = time.perf_counter()
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), disable=args.no_progress, transient=True) as progress:
        task = progress.add_task(f"{description} {args.env_id}", total=args.episodes)
        seeds = _GroupSeeds(args.seed, args.episodes, args.group_size)
        episodes = iter_rollout(setup.make_env, policy, seeds, batch_size=args.batch_size)
        try:
            with contextlib.closing(episodes):
                for index, traj in episodes:
                    held[index] = traj
                    while next_index in held:
                        with hold_interrupts():
                            keep(held[next_index])
                            del held[next_index]
                        next_index += 1
                    progress.advance(task)
        except KeyboardInterrupt:
            complete = False
    for index in sorted(held):  # finished, but after an episode the Ctrl-C cut short
        with hold_interrupts():
            keep(held.pop(index))
    return time.perf_counter() - start, complete


def _summary(args: argparse.Namespace, setup: _Setup, policy: Policy, running: RunningSummary,
             elapsed: float, complete: bool) -> dict[str, Any]:
    """The run's summary: settings, :class:`RunningSummary` statistics, speed, completeness."""
    stats = running.result()
    tokens = getattr(policy, "tokens_generated", None)
    return {
        "env_id": args.env_id,
        "policy": args.policy,
        "model": {"hf": args.model, "openai": getattr(policy, "model", None)}.get(args.policy),
        "env_kwargs": setup.env_kwargs,
        "wrappers": setup.wrappers,
        "seed": args.seed,
        "group_size": args.group_size,
        # False after a Ctrl-C: then "episodes" counts those finished and saved.
        "complete": complete,
        "episodes_requested": args.episodes,
        **stats,
        "elapsed_s": elapsed,
        "episodes_per_s": stats["episodes"] / elapsed if elapsed > 0 else math.inf,
        "tokens_generated": tokens,
        "tokens_per_s": tokens / elapsed if tokens is not None and elapsed > 0 else None,
    }


def verdict(summary: dict[str, Any]) -> str:
    """One plain sentence on how the policy did, and for a built-in base model what to run next."""
    who = summary["policy"] + (f" ({summary['model']})" if summary.get("model") else "")
    parts = [f"legal, parsable actions in {1.0 - summary['invalid_action_rate']:.0%} of turns"]
    outcomes = summary["outcomes"]
    if any(v for v in outcomes.values()):
        plural = {"win": "wins", "draw": "draws", "loss": "losses"}
        parts.append(", ".join(f"{rate:.0%} {plural.get(name, name)}"
                               for name, rate in outcomes.items() if not math.isnan(rate)))
    else:
        parts.append(f"mean return {summary['mean_return']:.3f}")
    if summary["truncated_rate"] > 0:
        parts.append(f"{summary['truncated_rate']:.0%} of episodes hit the turn limit")
    text = f"{who} over {summary['episodes']} episodes: " + "; ".join(parts) + "."
    if summary["policy"] == "hf" and summary.get("model") in MODEL_NAMES:  # a base model
        text += (" To train it: collect expert games with `textgym collect --policy minimax`, then"
                 " `textgym sft` and `textgym train` (README, 'Training').")
    return text


def cmd_eval(args: argparse.Namespace) -> int:
    """``textgym eval``: play, print the summary; with ``--output``, save each episode as it
    finishes to ``trajectories.jsonl`` and the summary last to ``summary.json``."""
    setup = _setup(args)
    out_dir = _checked_output(check_dir, Path(args.output)) if args.output else None
    policy = _build_policy(args.policy, _policy_kwargs(args, setup.stop))
    running = RunningSummary()
    with contextlib.ExitStack() as stack:
        sink = None
        if out_dir is not None:
            # The old summary describes trajectories about to be overwritten.
            (out_dir / "summary.json").unlink(missing_ok=True)
            sink = stack.enter_context(open_jsonl(out_dir / "trajectories.jsonl"))

        def keep(traj: Trajectory) -> None:
            if sink is not None:
                sink.write(traj.to_json())
            running.add(traj)

        elapsed, complete = _play(args, setup, policy, "eval", keep)
    summary = _summary(args, setup, policy, running, elapsed, complete)
    if out_dir is not None:
        with hold_interrupts():
            write_json(out_dir / "summary.json", _json_safe(summary))
    if not complete:
        saved = (f"; wrote them to {out_dir / 'trajectories.jsonl'} and {out_dir / 'summary.json'}"
                 ' ("complete": false)' if out_dir is not None else "; nothing saved (no --output)")
        print(f"textgym: interrupted after {summary['episodes']} of {args.episodes} episodes"
              + saved, file=sys.stderr)
        return 130
    _print_summary(summary)
    print(verdict(summary))
    if out_dir is not None:
        print(f"wrote {out_dir / 'summary.json'} and {out_dir / 'trajectories.jsonl'}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    """``textgym collect``: play, append each episode the filter keeps to the JSONL file as it
    finishes."""
    from textgym.collect import parse_filter, sft_record

    try:
        wanted = parse_filter(args.filter) if args.filter else (lambda _t: True)
    except ValueError as exc:
        raise UsageError(f"--filter: {exc}") from None
    setup = _setup(args)
    out = _checked_output(check_file, Path(args.output))
    policy = _build_policy(args.policy, _policy_kwargs(args, setup.stop))
    running = RunningSummary()
    with open_jsonl(out) as sink:

        def keep(traj: Trajectory) -> None:
            if wanted(traj):
                sink.write(json.dumps(sft_record(traj), ensure_ascii=False))
            running.add(traj)

        elapsed, complete = _play(args, setup, policy, "collect", keep)
    summary = _summary(args, setup, policy, running, elapsed, complete)
    kept = f"kept {sink.count} of {summary['episodes']} episodes" + (
        f" (filter: {args.filter})" if args.filter else "")
    if not complete:
        print(f"textgym: interrupted after {summary['episodes']} of {args.episodes} episodes; "
              f"{kept}; wrote {out} ({sink.count} whole records, valid JSONL)", file=sys.stderr)
        return 130
    _print_summary(summary)
    print(f"{kept}; wrote {out}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """``textgym play``: the single-agent env against its built-in opponent, or with
    ``--against`` the two-seat tic-tac-toe against a policy (:func:`_play_against`)."""
    from textgym.policies.human import HumanPolicy

    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed must be >= 0 (episode seeds are non-negative), got {args.seed}")
    given = [flag for flag, value in _play_against_flags(args).items() if value is not None]
    if args.against is None and given:
        raise UsageError(f"{', '.join(given)} can only be used with --against POLICY")
    if args.against is not None:
        return _play_against(args)
    env_kwargs = _parse_env_kwargs(args.env_kwargs)
    make_env, probe = _env_factory(args.env_id, env_kwargs, [])
    template = getattr(probe.unwrapped, "action_template", None)
    probe.close()
    policy = HumanPolicy(action_template=template)
    print(f"Playing {args.env_id}. Type your answer and press Enter; Ctrl-D quits.")
    try:
        while True:
            (traj,) = rollout(make_env, policy, [args.seed], batch_size=1)
            print(f"\n{traj.messages[-1]['content']}\n\nreturn {traj.episode_return:.2f}"
                  + (f", outcome {traj.outcome}" if traj.outcome else ""))
            args.seed = None if args.seed is None else args.seed + 1
            if not args.repeat:
                return 0
    except (EOFError, KeyboardInterrupt):
        print("\nbye")
        return 0


_TWO_SEAT_ENV_ID = "textgym/TicTacToe-v0"
_PLAY_AGAINST = ("hf", "openai", "minimax", "random")
#: Defaults of the options that only apply with ``--against`` (None in the parser, so that
#: giving one without ``--against`` can be reported).
_PLAY_AGAINST_DEFAULTS: dict[str, Any] = {
    "model": _DEFAULT_MODEL, "dtype": "auto", "max_new_tokens": 256, "temperature": 0.0,
    "top_p": 1.0, "mark": "X", "prompt_style": "compact",
}


def _play_against_flags(args: argparse.Namespace) -> dict[str, Any]:
    """``{flag: value}`` of the options that only apply with ``--against``."""
    names = [*_PLAY_AGAINST_DEFAULTS, "base_url"]
    flags = {f"--{name.replace('_', '-')}": getattr(args, name) for name in names}
    flags["--show-completions"] = args.show_completions or None
    return flags


class _ShowCompletions:
    """Wraps a policy and prints each completion it returns (``play --show-completions``)."""

    def __init__(self, policy: Policy, label: str):
        self.policy, self.label = policy, label
        self.name = getattr(policy, "name", type(policy).__name__)

    def act(self, conversations: Any, infos: Any) -> list[Any]:
        completions = self.policy.act(conversations, infos)
        for completion in completions:
            print(f"[{self.label}] {completion.text!r}", flush=True)
        return completions


def _play_against(args: argparse.Namespace) -> int:
    """``textgym play textgym/TicTacToe-v0 --against POLICY``: a person against a policy.

    The person sits in seat ``player_0`` and reads the full prompts; the policy sits in
    ``player_1`` and gets the ``--prompt-style`` prompts (compact by default, the style the
    trained tic-tac-toe models saw). Games are played with :func:`textgym.selfplay.selfplay` on
    the two-seat env, one at a time; ``--mark`` picks the person's mark (``random``: drawn
    from the game's seed).

    Raises:
        UsageError: for another env id, ``--env-kwargs``, or a policy that cannot be built.
        SystemExit: (code 2) when PettingZoo or the policy's extras are not installed.
    """
    if args.env_id != _TWO_SEAT_ENV_ID:
        raise UsageError(f"--against plays two-seat tic-tac-toe only; use {_TWO_SEAT_ENV_ID}, "
                         f"got {args.env_id!r}")
    if _parse_env_kwargs(args.env_kwargs):
        raise UsageError("--env-kwargs does not apply with --against; "
                         "use --mark and --prompt-style")
    for name, default in _PLAY_AGAINST_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    try:
        pettingzoo_env = importlib.import_module("textgym.envs.tictactoe.pettingzoo_env")
    except ImportError as exc:
        _fail(f"textgym play --against needs PettingZoo ({exc}); "
              "pip install \"textgym[multiagent]\"")
    from textgym.envs.tictactoe.env import TicTacToeEnv
    from textgym.policies.human import HumanPolicy

    policy_args = argparse.Namespace(**vars(args), policy=args.against, batch_size=1,
                                     no_reasoning=False)
    stop = TicTacToeEnv.stop_strings  # the answer ends at </move>
    model: Policy = _build_policy(args.against, _policy_kwargs(policy_args, stop))
    if args.show_completions:
        model = _ShowCompletions(model, args.against)
    human = HumanPolicy(action_template=TicTacToeEnv.action_template)
    styles = {"player_0": "full", "player_1": args.prompt_style}

    def make_env() -> Any:
        return pettingzoo_env.env(prompt_style=styles)

    served = getattr(model, "model", None) if args.against == "openai" else None
    who = {"hf": f"hf {args.model}", "openai": f"openai {served or '(first model served)'}"}
    print(f"Playing {args.env_id} against {who.get(args.against, args.against)}, which sees the "
          f"{args.prompt_style} prompt. Type a cell number 0-8 and press Enter; Ctrl-D quits.")
    first = {"X": "player_0", "O": "player_1", "random": "random"}[args.mark]
    return _play_games(args, [human, model], make_env, first)


def _play_games(args: argparse.Namespace, policies: list[Any], make_env: Callable[[], Any],
                first: str) -> int:
    """Play games of ``policies[0]`` (the person) against ``policies[1]`` until done."""
    from textgym.selfplay import selfplay

    try:
        while True:
            (game,) = selfplay(policies, [args.seed], batch_size=1, first_player=first,
                               make_env=make_env)
            mine = game.trajectories["player_0"]
            outcome = game.outcomes["player_0"]
            print(f"\n{mine.messages[-1]['content']}\n")
            if outcome is None:
                print(f"Result: no result, the game hit the limit of actions per seat "
                      f"(you played {game.marks['player_0']}).")
            else:
                said = {"win": "you win", "draw": "a draw", "loss": "you lose"}[outcome]
                print(f"Result: {said} (you played {game.marks['player_0']}).")
            args.seed = None if args.seed is None else args.seed + 1
            if not args.repeat:
                return 0
    except (EOFError, KeyboardInterrupt):
        print("\nbye")
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="textgym", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"textgym {textgym.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="list the registered environments")
    p_list.set_defaults(func=cmd_list)

    def add_play_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("env_id", help="registered id, e.g. textgym/TicTacToe-v0")
        p.add_argument("--policy", choices=[p for p in POLICY_NAMES if p != "human"], default="minimax")
        p.add_argument("--model", default=_DEFAULT_MODEL,
                       help="for --policy hf: 'tiny', 'gemma-3-270m', a HF id or a local path; for "
                            "--policy openai: a served model name (default: the first one served)")
        p.add_argument("--base-url", action="append", default=None,
                       help="for --policy openai: endpoint URL (default http://127.0.0.1:8000/v1); "
                            "repeat or separate with commas to spread requests over several")
        p.add_argument("--dtype", choices=DTYPE_NAMES, default="auto",
                       help="weights of an hf model; auto: bfloat16 where the CPU/GPU computes it "
                       "natively, else float32")
        p.add_argument("--episodes", type=int, default=100)
        p.add_argument("--seed", type=int, default=0,
                       help="group g of episodes is reset with seed + g (one group per episode by default)")
        p.add_argument("--group-size", type=int, default=1,
                       help="copies of each task sharing one seed, as in a GRPO group")
        p.add_argument("--env-kwargs", default="{}", help="JSON object passed to gymnasium.make")
        p.add_argument("--wrappers", default="",
                       help=f"comma-separated, applied in order: {', '.join(_WRAPPERS)}")
        p.add_argument("--batch-size", type=int, default=32,
                       help="episodes played at once (and sequences per generate call)")
        p.add_argument("--max-new-tokens", type=int, default=256)
        p.add_argument("--temperature", type=float, default=0.7)
        p.add_argument("--top-p", type=float, default=1.0)
        p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        p.add_argument("--no-reasoning", action="store_true",
                       help="random/minimax: answer <move>N</move> without a <think> block")

    p_eval = sub.add_parser("eval", help="play episodes with a policy and report statistics")
    add_play_args(p_eval)
    p_eval.add_argument("--output", default=None, help="directory for summary.json and trajectories.jsonl")
    p_eval.set_defaults(func=cmd_eval)

    p_collect = sub.add_parser("collect", help="play episodes and write chat-format JSONL for SFT")
    add_play_args(p_collect)
    p_collect.add_argument("--output", required=True, help="JSONL file to write")
    p_collect.add_argument("--filter", default=None,
                           help="keep episodes matching e.g. 'outcome in win,draw' or 'return >= 0.5'")
    p_collect.set_defaults(func=cmd_collect)

    # The trainers parse their own flags from their config dataclasses (see _run_trainer);
    # these entries only list them in `textgym --help`.
    sub.add_parser("sft", help="supervised fine-tuning on collected chat JSONL (textgym sft --help)", add_help=False)
    sub.add_parser("train", help="GRPO training of an LLM policy on an env (textgym train --help)", add_help=False)

    p_play = sub.add_parser("play", help="play an environment yourself in the terminal")
    p_play.add_argument("env_id")
    p_play.add_argument("--seed", type=int, default=None,
                        help="seed of the first episode (then +1 each); with --against, also the "
                             "policy's seed")
    p_play.add_argument("--env-kwargs", default="{}")
    p_play.add_argument("--repeat", action="store_true", help="start a new episode after each one")
    p_play.add_argument("--against", choices=_PLAY_AGAINST, default=None,
                        help=f"play {_TWO_SEAT_ENV_ID} against this policy instead of the env's "
                             "built-in opponent (needs PettingZoo)")
    p_play.add_argument("--mark", choices=("X", "O", "random"), default=None,
                        help="with --against: your mark (default X; X moves first)")
    p_play.add_argument("--prompt-style", choices=("compact", "full"), default=None,
                        help="with --against: the prompts the policy sees (default compact, the "
                             "style of the trained tic-tac-toe models); you see the full ones")
    p_play.add_argument("--model", default=None,
                        help=f"with --against hf: 'tiny', '{_DEFAULT_MODEL}' (default), a HF "
                             "id, or a local model or LoRA adapter directory; with --against "
                             "openai: a served model name (default: the first one served)")
    p_play.add_argument("--base-url", action="append", default=None,
                        help="with --against openai: endpoint URL "
                             "(default http://127.0.0.1:8000/v1)")
    p_play.add_argument("--dtype", choices=DTYPE_NAMES, default=None,
                        help="with --against hf: weights' dtype (default auto)")
    p_play.add_argument("--max-new-tokens", type=int, default=None,
                        help="with --against hf|openai: tokens per answer (default 256)")
    p_play.add_argument("--temperature", type=float, default=None,
                        help="with --against hf|openai: sampling temperature (default 0, greedy)")
    p_play.add_argument("--top-p", type=float, default=None,
                        help="with --against hf|openai: nucleus sampling (default 1.0)")
    p_play.add_argument("--show-completions", action="store_true",
                        help="with --against: print each raw answer of the policy")
    p_play.set_defaults(func=cmd_play)

    p_compare = sub.add_parser("compare", help="compare training runs: last metrics and overlaid plots")
    p_compare.add_argument("runs", nargs="+", help="two or more run directories (with metrics.jsonl)")
    p_compare.add_argument("--plots", default=None, help="directory for the overlaid PNG plots")
    p_compare.set_defaults(func=cmd_compare)
    return parser


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        from textgym.algos.metrics import compare_runs

        rows, paths = compare_runs(args.runs, args.plots)
    except ImportError as exc:
        _fail(f"textgym compare needs the training extras ({exc}); pip install \"textgym[train]\"")
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(f"compare: {exc}") from None
    from rich.console import Console
    from rich.table import Table

    names = [Path(run).name for run in args.runs]
    table = Table(title="last value of each metric (train: last step; eval: last evaluation)")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(row["metric"], *(f"{row[n]:.4g}" if n in row else "-" for n in names))
    Console(width=200).print(table)
    for path in paths:
        print(f"wrote {path}")
    return 0


def _run_trainer(command: str, argv: Sequence[str]) -> int:
    """``textgym sft`` / ``textgym train``: flags from the config dataclass (``tyro``).

    What can be checked before training starts is, and is reported as a usage error: the
    config's own validation, the env, wrappers and kwargs (``train``), the output directory,
    and the errors of loading the model or reading the data.
    """
    try:
        import tyro

        from textgym.algos.common import check_resumable
        from textgym.data import read_jsonl
        from textgym.models import load_model

        from textgym.algos.sft import read_conversations

        if command == "sft":
            from textgym.algos.sft import SFTConfig as Config
            from textgym.algos.sft import train
        else:
            from textgym.algos.grpo import GRPOConfig as Config
            from textgym.algos.grpo import train
    except ImportError as exc:
        _fail(f"textgym {command} needs the training extras ({exc}); pip install \"textgym[llm,train]\"")
    config = _trainer_config(Config, command, argv, tyro)
    if getattr(config, "env_id", None) is not None:  # train: build the env once, as train will
        _, probe = _env_factory(config.env_id, dict(config.env_kwargs), list(config.wrappers))
        probe.close()
    try:
        check_dir(Path(config.output_dir), "--output-dir")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        result = train(config)
    except (ValueError, OSError, ImportError) as exc:
        # Raised while loading the model or the data, or refusing a resume: before training.
        if _raised_in(exc, load_model, read_jsonl, check_resumable, read_conversations):
            raise UsageError(_one_line(exc)) from None
        raise
    print(json.dumps(_json_safe(result), indent=2))
    return 0


def _trainer_config(config_class: type, command: str, argv: Sequence[str], tyro: Any) -> Any:
    """Parse ``argv`` into ``config_class``; its validation error as a one-line UsageError.

    ``tyro`` parses into a subclass without ``__post_init__`` (tyro would print a validation
    error as a multi-line box); the config is then built here, where its ``ValueError`` can
    be reported like any usage error. The ``--help`` text is the config's own.
    """
    unchecked = dataclasses.make_dataclass(
        config_class.__name__, [], bases=(config_class,), kw_only=True,
        namespace={"__post_init__": lambda self: None, "__doc__": config_class.__doc__,
                   "__module__": config_class.__module__},
    )
    parsed = tyro.cli(unchecked, args=list(argv), prog=f"textgym {command}",
                      config=(tyro.conf.FlagConversionOff,))
    values = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(config_class) if f.init}
    try:
        return config_class(**values)
    except ValueError as exc:  # __post_init__ validation: one line, exit 2
        raise UsageError(_one_line(exc)) from None


def _raised_in(exc: BaseException, *functions: Callable[..., Any]) -> bool:
    """Whether ``exc`` was raised inside one of ``functions`` (its traceback passes through one)."""
    codes = {getattr(f, "__code__", None) for f in functions}
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``textgym`` console script; returns the exit code.

    0: done; 2: a usage error (one ``textgym: error:`` line); 130: interrupted by Ctrl-C (one
    line; ``eval``/``collect`` keep and report what they saved).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in ("sft", "train"):
            return _run_trainer(argv[0], argv[1:])
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UsageError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        print("textgym: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
