"""The ``textgym`` command line: ``list``, ``eval``, ``collect``, ``play``, ``sft``, ``train``,
``compare``, ``report``, ``check``, ``export``, ``serve``, ``run`` and ``demo``.

- ``textgym list``: the registered environments.
- ``textgym eval ENV_ID``: play episodes with a policy and report statistics.
- ``textgym collect ENV_ID [--output FILE]``: play episodes and write chat-format JSONL for SFT
  (default file: ``runs/collect-ENV-TIME.jsonl``); without ``--policy``, ``eval`` and
  ``collect`` play the env's expert (``minimax``, ``gold``), else ``random``.
- ``textgym play ENV_ID``: play an env yourself in the terminal (``--against`` a policy).
- ``textgym sft --data FILE``: supervised fine-tuning on collected chat JSONL.
- ``textgym train ENV_ID``: GRPO training of an LLM policy on an env.
- ``textgym compare RUN RUN ...``: compare eval, train and sft runs side by side.
- ``textgym report RUN [RUN ...]``: one self-contained HTML page of eval, collect and train runs.
- ``textgym check ENV_ID`` (or ``--all``): an env's quality card, a table row and JSON.
- ``textgym export RUN --format atif --output FILE``: a run's episodes as ATIF trajectories
  (default ``--format chat``: the chat JSONL of ``collect``).
- ``textgym serve ENV_ID``: the env as an OpenEnv server, one env per WebSocket session (the
  ``serve`` extra; ``--env-url`` of ``eval``, ``collect`` and ``train`` plays on it).
- ``textgym run RECIPE.toml --work-dir DIR``: a recipe's stages (each a subcommand with its
  options) in order, skipping those done; one table of its evaluations (:mod:`textgym.recipes`).
- ``textgym demo``: the base Gemma 3 270M and the committed trained adapter play the same
  seeded tic-tac-toe games against the optimal and a random player, side by side.

One grammar for all of them (:mod:`textgym.cli.usage`): each subcommand is one config
dataclass parsed with ``tyro``; the env id is the first positional argument; ``--env-kwargs``
is a JSON object; lists are space-separated (``--wrappers a b``); booleans are
``--flag/--no-flag``; ``--help`` shows every option with its default. ENV_ID is any
registered Gymnasium id, ``module:EnvName-v0`` (the module is imported and registers it), or
an id a package registers through the ``textgym.envs`` entry point.

Bad arguments (an unknown option or env id, malformed JSON, out-of-range values, a config's
validation error, a policy that cannot play the env, an output path that cannot be written)
print one line starting with ``textgym: error:`` and exit with code 2; they are found before
anything is played. ``eval --output-dir`` and ``collect`` write each episode as it finishes;
a Ctrl-C stops the run, keeps what was written (marked incomplete), prints one line and exits
with code 130. An endpoint that fails while ``--policy openai`` plays stops the run the same
way, with one ``textgym: error:`` line and exit code 1. Any :mod:`textgym.errors` error that
reaches :func:`main` is one such line: exit code 2 for a setup error, 1 otherwise; any other
exception is a bug and keeps its traceback. A ``--model`` that names a Hugging
Face hub id is loaded in the hub's offline mode when the hub cannot be reached
(:mod:`textgym.cli.hub_offline`): one that is not cached fails at once.

An evaluation is a pass over the tasks: on an env that lists its tasks (``task_ids``: GSM8K-v0,
ReverseText-v0, Workplace-v1) ``eval`` and ``collect`` play each task once, in order, unless
``--limit``, ``--task-ids``, ``--rollouts-per-task`` or ``--sample-tasks`` (random draws with
replacement, as for training) say otherwise (:mod:`textgym.evaluation`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple

from textgym.checks import one_line
from textgym.cli import hub_offline
from textgym.cli.cpu_share import share_the_cpu
from textgym.cli.usage import fail, parse_config, plain_text
from textgym.errors import SetupError, TextgymError, UsageError

__all__ = ["SUBCOMMANDS", "Subcommand", "main"]


class Subcommand(NamedTuple):
    """One subcommand: the module of ``textgym.cli`` that holds its ``Config`` (the options, a
    dataclass) and ``run(config)``, the one line ``textgym --help`` shows for it, and the
    extras its module needs beyond the core install (``pip install "textgym[extras]"``)."""

    module: str
    summary: str
    extras: str | None = None


SUBCOMMANDS: dict[str, Subcommand] = {
    "list": Subcommand("listing", "list the registered environments"),
    "eval": Subcommand("evaluate", "play episodes with a policy and report statistics"),
    "collect": Subcommand("collect", "play episodes and write chat-format JSONL for SFT"),
    "play": Subcommand("play", "play an environment yourself in the terminal"),
    "sft": Subcommand("sft", "supervised fine-tuning on collected chat JSONL", "llm,train"),
    "train": Subcommand("train", "GRPO training of an LLM policy on an env", "llm,train"),
    "compare": Subcommand(
        "compare", "compare eval, train and sft runs: a table side by side, plots"
    ),
    "report": Subcommand(
        "report", "write one self-contained HTML report of eval, collect and train runs"
    ),
    "check": Subcommand(
        "check", "an env's quality card: determinism, spaces, oracle, floors, leakage"
    ),
    "export": Subcommand("export", "write a run's episodes as chat JSONL or ATIF trajectories"),
    "serve": Subcommand("serve", "serve an env through OpenEnv, one env per session", "serve"),
    "run": Subcommand("run", "run a recipe file's stages in order, resuming where it stopped"),
    "demo": Subcommand(
        "demo",
        "the base Gemma 3 270M and a trained adapter play tic-tac-toe side by side",
        "llm,train,gemma",
    ),
}


def _usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {sub.summary}" for name, sub in SUBCOMMANDS.items())
    return (
        "usage: textgym [-h] [--version] SUBCOMMAND [OPTIONS]\n\n"
        "Gymnasium text environments for RL with verifiable rewards: evaluate, collect, play "
        "and train.\n\nsubcommands:\n"
        f"{rows}\n\n"
        "Run `textgym SUBCOMMAND --help` for its options (each shown with its default)."
    )


def _run(argv: list[str]) -> int:
    import textgym

    if not argv:
        raise UsageError(f"expected a subcommand: {', '.join(SUBCOMMANDS)} (textgym --help)")
    if argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] == "--version":
        print(f"textgym {textgym.__version__}")
        return 0
    if argv[0] not in SUBCOMMANDS:
        raise UsageError(
            f"unknown subcommand {argv[0]!r}; expected one of {', '.join(SUBCOMMANDS)}"
        )
    name = argv[0]
    subcommand = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(f"textgym.cli.{subcommand.module}")
    except ImportError as exc:
        if subcommand.extras is None:
            raise
        fail(f'textgym {name} needs extras ({exc}); pip install "textgym[{subcommand.extras}]"')
    config = parse_config(module.Config, argv[1:], f"textgym {name}", plain_text(module.__doc__))
    if (
        hub_offline.hub_model(config) is not None
    ):  # offline: fail at once, not after ~80 s of retries
        hub_offline.offline_unless_reachable()
    return module.run(config)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``textgym`` console script; returns the exit code.

    0: done; 1: a run that failed on its way (a :class:`~textgym.errors.TextgymError`: the
    endpoint of ``--policy openai`` failed, a return or loss went non-finite; one
    ``textgym: error:`` line; ``eval``/``collect`` keep and report what they saved, as after a
    Ctrl-C); 2: a usage error or a :class:`~textgym.errors.SetupError` (one ``textgym: error:``
    line, raised as ``SystemExit(2)``);
    130: interrupted by Ctrl-C (one line; ``eval``/``collect`` keep and report what they
    saved).
    """
    share_the_cpu()
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        fail(str(exc))
    except SetupError as exc:  # what the user fixes before running again, as a bad option
        fail(one_line(exc))
    except TextgymError as exc:  # a run that failed on its way: its data, numbers, endpoint
        print(f"textgym: error: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("textgym: interrupted", file=sys.stderr)
        return 130
