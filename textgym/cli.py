"""The ``textgym`` command line: ``list``, ``eval``, ``collect`` and ``play``.

Bad arguments (unknown env id, malformed JSON, out-of-range values) print one line starting
with ``textgym: error:`` and exit with code 2, like any argparse usage error.
"""

from __future__ import annotations

import argparse
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
from textgym.evaluation import summarize
from textgym.models import DTYPE_NAMES, MODEL_NAMES
from textgym.policies import POLICY_NAMES, Policy, make_policy
from textgym.rollout import Trajectory, rollout
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

    try:  # build one env now so that bad kwargs fail here, with the env's own message
        probe = make()
    except (ValueError, TypeError) as exc:
        raise UsageError(f"cannot make {env_id} with {env_kwargs}: {exc}") from None
    return make, probe


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
    table.add_row("mean return", f"{ret:.4f} ± {err:.4f}" if err == err else f"{ret:.4f}")
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


def _play(args: argparse.Namespace, description: str) -> tuple[list[Trajectory], dict[str, Any]]:
    """Shared by ``eval`` and ``collect``: validate, build env and policy, play, summarize."""
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.group_size < 1 or args.episodes % args.group_size:
        raise UsageError(
            f"--episodes {args.episodes} is not a multiple of --group-size {args.group_size}; "
            "use a multiple of the group size"
        )
    env_kwargs = _parse_env_kwargs(args.env_kwargs)
    wrappers = [w for w in args.wrappers.split(",") if w] if args.wrappers else []
    make_env, probe = _env_factory(args.env_id, env_kwargs, wrappers)
    stop = getattr(probe.unwrapped, "stop_strings", ())  # the task says where a completion may end
    probe.close()
    policy = _build_policy(args.policy, _policy_kwargs(args, stop))
    # GRPO-style groups: the G copies of a task share one seed (same task, same opponent).
    seeds = [args.seed + i // args.group_size for i in range(args.episodes)]

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    start = time.perf_counter()
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), disable=args.no_progress, transient=True) as progress:
        task = progress.add_task(f"{description} {args.env_id}", total=args.episodes)
        trajectories = rollout(make_env, policy, seeds, batch_size=args.batch_size,
                               on_episode_end=lambda _t: progress.advance(task))
    elapsed = time.perf_counter() - start

    tokens = getattr(policy, "tokens_generated", None)
    summary = {
        "env_id": args.env_id,
        "policy": args.policy,
        "model": {"hf": args.model, "openai": getattr(policy, "model", None)}.get(args.policy),
        "env_kwargs": env_kwargs,
        "wrappers": wrappers,
        "seed": args.seed,
        "group_size": args.group_size,
        **summarize(trajectories),
        "elapsed_s": elapsed,
        "episodes_per_s": len(trajectories) / elapsed if elapsed > 0 else math.inf,
        "tokens_generated": tokens,
        "tokens_per_s": tokens / elapsed if tokens is not None and elapsed > 0 else None,
    }
    return trajectories, summary


def verdict(summary: dict[str, Any]) -> str:
    """One plain sentence on how the policy did, and for a built-in base model what to run next."""
    who = summary["policy"] + (f" ({summary['model']})" if summary.get("model") else "")
    parts = [f"legal, parsable actions in {1.0 - summary['invalid_action_rate']:.0%} of turns"]
    outcomes = summary["outcomes"]
    if any(v for v in outcomes.values()):
        plural = {"win": "wins", "draw": "draws", "loss": "losses"}
        parts.append(", ".join(f"{rate:.0%} {plural.get(name, name)}"
                               for name, rate in outcomes.items() if rate == rate))
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
    trajectories, summary = _play(args, "eval")
    _print_summary(summary)
    print(verdict(summary))
    if args.output:
        _write_outputs(Path(args.output), summary, trajectories)
    return 0


def _write_outputs(out_dir: Path, summary: dict[str, Any], trajectories: Sequence[Trajectory]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(_json_safe(summary), indent=2) + "\n")
    with open(out_dir / "trajectories.jsonl", "w", encoding="utf-8") as fh:
        for traj in trajectories:
            fh.write(traj.to_json() + "\n")
    print(f"wrote {out_dir / 'summary.json'} and {out_dir / 'trajectories.jsonl'}")


def cmd_collect(args: argparse.Namespace) -> int:
    from textgym.collect import parse_filter, sft_record

    try:
        keep = parse_filter(args.filter) if args.filter else (lambda _t: True)
    except ValueError as exc:
        raise UsageError(f"--filter: {exc}") from None
    trajectories, summary = _play(args, "collect")
    kept = [t for t in trajectories if keep(t)]
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        for traj in kept:
            fh.write(json.dumps(sft_record(traj), ensure_ascii=False) + "\n")
    _print_summary(summary)
    print(f"kept {len(kept)} of {len(trajectories)} episodes"
          + (f" (filter: {args.filter})" if args.filter else "") + f"; wrote {out}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """``textgym play``: the single-agent env against its built-in opponent, or with
    ``--against`` the two-seat tic-tac-toe against a policy (:func:`_play_against`)."""
    from textgym.policies.human import HumanPolicy

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
    """``textgym sft`` / ``textgym train``: flags from the config dataclass (``tyro``)."""
    try:
        import tyro

        if command == "sft":
            from textgym.algos.sft import SFTConfig as Config
            from textgym.algos.sft import train
        else:
            from textgym.algos.grpo import GRPOConfig as Config
            from textgym.algos.grpo import train
    except ImportError as exc:
        _fail(f"textgym {command} needs the training extras ({exc}); pip install \"textgym[llm,train]\"")
    try:
        config = tyro.cli(Config, args=list(argv), prog=f"textgym {command}",
                          config=(tyro.conf.FlagConversionOff,))
    except ValueError as exc:  # __post_init__ validation: one line, exit 2
        raise UsageError(str(exc)) from None
    result = train(config)
    print(json.dumps(_json_safe(result), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``textgym`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("sft", "train"):
        try:
            return _run_trainer(argv[0], argv[1:])
        except UsageError as exc:
            _fail(str(exc))
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        _fail(str(exc))


if __name__ == "__main__":
    sys.exit(main())
