"""``textgym play``: play an env yourself in the terminal.

Alone, the person plays the single-agent env against its built-in opponent (if it has one);
the system prompt, which gives the task's answer format (GSM8K's ``#### 42``), is shown before
the first turn of every episode, and on a tool env (``info["tools"]`` not empty:
EmailToolUse-v1, Workplace-v1) the tools and the call format too. With ``--against POLICY`` the person
plays two-seat tic-tac-toe against a policy (:func:`play_against`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from textgym.checks import check_seed
from textgym.cli import building
from textgym.cli._options import EnvOptions, ModelOptions
from textgym.cli.usage import fail
from textgym.errors import UsageError
from textgym.policies import Policy

__all__ = ["PlayConfig", "Tally", "readable_observation", "run", "tool_setup_text"]

_TWO_SEAT_ENV_ID = "textgym/TicTacToe-v0"


@dataclasses.dataclass(kw_only=True)
class PlayConfig(ModelOptions, EnvOptions):
    """Play an env yourself in the terminal, alone or against a policy."""

    seed: int | None = None
    """Seed of the first episode (then +1 each; None: unseeded); with --against, also the
    policy's seed. An integer in [0, 2**32 - 1], as for every command."""
    repeat: bool = False
    """Start a new episode after each one."""
    against: Literal["hf", "openai", "minimax", "random"] | None = None
    """Play textgym/TicTacToe-v0 against this policy instead of the env's built-in opponent
    (needs PettingZoo); the options below apply only with it."""
    mark: Literal["X", "O", "random"] = "X"
    """With --against: your mark (X moves first; random: drawn from the game's seed)."""
    prompt_style: Literal["compact", "full"] = "compact"
    """With --against: the prompts the policy sees (compact: the style of the trained
    tic-tac-toe models); you see the full ones."""
    temperature: float = 0.0
    """With --against hf or openai: sampling temperature (0: greedy)."""
    show_completions: bool = False
    """With --against: print each raw answer of the policy."""

    def __post_init__(self) -> None:
        self.check_env()
        self.check_sampling()
        if self.seed is not None:
            check_seed("--seed", self.seed)
        if self.against is None:
            given = [flag for flag, value in self._against_only().items() if value]
            if given:
                raise ValueError(f"{', '.join(given)} can only be used with --against POLICY")

    def _against_only(self) -> dict[str, bool]:
        """``{--flag: given}`` of the options that apply only with ``--against``."""
        defaults = {f.name: f.default for f in dataclasses.fields(PlayConfig)}
        names = [
            "mark",
            "prompt_style",
            *(f.name for f in dataclasses.fields(ModelOptions)),
            "temperature",
            "show_completions",
        ]
        return {
            f"--{name.replace('_', '-')}": getattr(self, name) != defaults[name]
            for name in dict.fromkeys(names)
        }


Config = PlayConfig


def run(config: PlayConfig) -> int:
    """Play episodes one at a time until the input ends (Ctrl-D) or, without ``--repeat``,
    after the first."""
    from textgym.policies.human import HumanPolicy

    if config.against is not None:
        return play_against(config)
    make_env, probe = building.build_env(config.env_id, config.env_kwargs, config.wrappers)
    template = probe.unwrapped.action_template
    probe.close()
    policy = _ShowSetup(HumanPolicy(action_template=template), template)
    print(f"Playing {config.env_id}. Type your answer and press Enter; Ctrl-D quits.")
    return _episodes_loop(config, lambda seed: _one_episode(make_env, policy, seed))


def _one_episode(
    make_env: Callable[[], Any], policy: Policy, seed: int | None
) -> tuple[str | None, float]:
    """Play one episode; print its last observation and result; return (outcome, return)."""
    from textgym.rollout import rollout

    (traj,) = rollout(make_env, policy, [seed], batch_size=1)
    print(
        f"\n{readable_observation(traj.messages[-1]['content'])}\n\n"
        f"return {traj.episode_return:.2f}" + (f", outcome {traj.outcome}" if traj.outcome else "")
    )
    return traj.outcome, traj.episode_return


class Tally:
    """The running tally of ``play --repeat``: wins, draws and losses, and the mean return.

    Example:
        >>> tally = Tally()
        >>> for outcome, ret in [("win", 1.0), ("loss", 0.0), ("win", 1.0)]:
        ...     tally.add(outcome, ret)
        >>> tally.line()
        'after 3 games: 2 wins, 0 draws, 1 loss (W/D/L 2/0/1), mean return 0.67'
    """

    def __init__(self) -> None:
        self.counts = {"win": 0, "draw": 0, "loss": 0}
        self.episodes, self.total = 0, 0.0

    def add(self, outcome: str | None, episode_return: float) -> None:
        """Count one finished episode (``outcome`` ``None``: no result, e.g. a time limit)."""
        self.episodes += 1
        self.total += episode_return
        if outcome in self.counts:
            self.counts[outcome] += 1

    def line(self) -> str:
        """The tally in one line (W/D/L only when an episode had one of those outcomes)."""
        mean = f"mean return {self.total / self.episodes:.2f}" if self.episodes else ""
        n = self.episodes
        if not any(self.counts.values()):
            return f"after {n} episode{'s' * (n != 1)}: {mean}"
        w, d, lost = self.counts.values()
        words = (
            f"{w} win{'s' * (w != 1)}, {d} draw{'s' * (d != 1)}, {lost} loss{'es' * (lost != 1)}"
        )
        return f"after {n} game{'s' * (n != 1)}: {words} (W/D/L {w}/{d}/{lost}), {mean}"


def _episodes_loop(
    config: PlayConfig, play_one: Callable[[int | None], tuple[str | None, float]]
) -> int:
    """Call ``play_one(seed)`` until done; with ``--repeat`` print the running tally after
    each episode (:class:`Tally`). Ctrl-D or Ctrl-C says bye (with the tally) and exits 0."""
    seed, tally = config.seed, Tally()
    try:
        while True:
            tally.add(*play_one(seed))
            seed = None if seed is None else seed + 1
            if not config.repeat:
                return 0
            print(tally.line())
    except (EOFError, KeyboardInterrupt):
        print("\nbye" + (f"; {tally.line()}" if config.repeat and tally.episodes else ""))
        return 0


class _ShowSetup:
    """Wraps the person's policy: before the first turn of an episode, shows the system prompt
    (the task's answer format) and, on a tool env, the tools (name, arguments, description) and
    the call format; and shows each tool response readably (:func:`readable_observation`).
    ``template`` is the env's :attr:`~textgym.TextEnv.action_template`, which a bare number
    typed is sent in (said under the system prompt)."""

    def __init__(self, policy: Policy, template: str | None = None):
        self.policy, self.name, self.template = policy, "human", template

    def act(self, conversations: Sequence[Any], infos: Sequence[Mapping[str, Any]]) -> list[Any]:
        shown = []
        for messages, info in zip(conversations, infos):
            # The first turn: no assistant message beyond a started game's history.
            played = sum(m["role"] == "assistant" for m in messages)
            if played == sum(m["role"] == "assistant" for m in info.get("history", ())):
                if info.get("tools"):
                    print(tool_setup_text(messages, info))
                else:
                    print(self._setup_text(messages, info))
                for message in info.get("history", ()):  # a game started part-way through
                    said = message["content"]
                    print(f"> {said}" if message["role"] == "assistant" else f"\n{said}\n")
            last = dict(messages[-1])
            if info.get("tools") and isinstance(last.get("content"), str):
                last["content"] = readable_observation(last["content"])
            shown.append([*messages[:-1], last])
        return self.policy.act(shown, infos)

    def _setup_text(self, messages: Sequence[Mapping[str, Any]], info: Mapping[str, Any]) -> str:
        """The system prompt of an env without tools, and what a bare number typed becomes."""
        system = info.get("system_prompt") or next(
            (m["content"] for m in messages if m["role"] == "system"), ""
        )
        lines = ["", "System prompt:", system or "(none)"]
        if self.template is not None:
            lines += ["", f"A bare number typed is sent as {self.template.format('N')}."]
        return "\n".join(lines)


def tool_setup_text(messages: Sequence[Mapping[str, Any]], info: Mapping[str, Any]) -> str:
    """What a person needs before the first turn of a tool episode: the system prompt, each tool
    as ``name(argument: type, optional?: type)  description``, and the call format.

    The tools are listed once: a system prompt that lists them itself (``- name(...)`` lines,
    as textgym's tool envs write it) shows a pointer to the list with the argument types
    instead of its own lines.
    """
    system = info.get("system_prompt") or next(
        (m["content"] for m in messages if m["role"] == "system"), ""
    )
    count = len(info["tools"])
    names = [tool.get("function", tool)["name"] for tool in info["tools"]]
    system = _without_tool_lines(system, names, f"[the {count} tools are listed below]")
    lines = ["", "System prompt:", system, "", f"Tools ({count}):"]
    for tool in info["tools"]:
        spec = tool.get("function", tool)  # OpenAI chat form nests the function
        parameters = spec.get("parameters", {})
        required = set(parameters.get("required", []))
        arguments = ", ".join(
            f"{name}{'' if name in required else '?'}: {schema.get('type', 'any')}"
            for name, schema in parameters.get("properties", {}).items()
        )
        lines.append(f"- {spec['name']}({arguments})  {spec.get('description', '')}".rstrip())
    example = {"name": "<tool name>", "arguments": {"<argument>": "<value>"}}
    lines += [
        "",
        f"Call format: <tool_call>{json.dumps(example)}</tool_call>, one block per call, "
        "several per reply allowed; a reply without a tool call is your final answer.",
    ]
    return "\n".join(lines)


def _without_tool_lines(system: str, names: Sequence[str], pointer: str) -> str:
    """``system`` with the lines that list a tool (``- name(``) replaced by ``pointer``, and the
    heading line just before them (one ending in ``:``) too; unchanged if it lists none."""
    lines = system.split("\n")
    listed = [i for i, line in enumerate(lines) if line.startswith(tuple(f"- {n}(" for n in names))]
    if not listed:
        return system
    first = listed[0]
    if first > 0 and lines[first - 1].rstrip().endswith(":"):
        first -= 1
    kept = [line for i, line in enumerate(lines) if i not in set(listed) and i != first]
    kept.insert(first, pointer)
    return "\n".join(kept)


_TOOL_RESPONSE = re.compile(r"(<tool_response>\n?)(.*?)(\n?</tool_response>)", re.S)


def readable_observation(text: str) -> str:
    r"""A tool env's observation as a person reads it: each ``<tool_response>`` holding JSON is
    shown as indented ``key: value`` lines, text with line breaks (real ones, or the
    two-character ``\n`` that the stored email bodies hold) as lines of its own under ``|``.
    Anything else is left as it is. Only the display changes; the env and the policy see the
    original text.

    Example:
        >>> shown = readable_observation(
        ...     '<tool_response>\n{"body": "Hi,\\nBye", "n": 2}\n</tool_response>'
        ... )
        >>> print(shown)
        <tool_response>
        body:
          | Hi,
          | Bye
        n: 2
        </tool_response>
    """

    def block(match: re.Match[str]) -> str:
        try:
            value = json.loads(match.group(2))
        except ValueError:
            return match.group(0)
        if not isinstance(value, (dict, list)):
            return match.group(0)
        return match.group(1) + "\n".join(_readable(value, 0)) + match.group(3)

    return _TOOL_RESPONSE.sub(block, text)


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value.replace("\r\n", "\n").replace("\\n", "\n")
    return json.dumps(value)


def _readable(value: Any, depth: int) -> list[str]:
    """``value`` (parsed JSON) as indented lines: ``key: value``, ``- item``, text blocks."""
    pad = "  " * depth
    if isinstance(value, list):
        lines = []
        for item in value:
            inner = _readable(item, depth + 1)
            if not inner:
                continue
            lines.append(f"{pad}- {inner[0][len(pad) + 2 :]}")
            lines += inner[1:]
        return lines or [f"{pad}[]"]
    if not isinstance(value, dict):
        text = _scalar(value)
        return [
            f"{pad}{line}" if "\n" not in text else f"{pad}| {line}" for line in text.split("\n")
        ]
    lines = []
    for key, item in value.items():
        if isinstance(item, (dict, list)) and item:
            lines.append(f"{pad}{key}:")
            lines += _readable(item, depth + 1)
            continue
        text = _scalar(item)
        if "\n" in text:
            lines.append(f"{pad}{key}:")
            lines += [f"{pad}  | {line}".rstrip() for line in text.split("\n")]
        else:
            lines.append(f"{pad}{key}: {text}")
    return lines or [f"{pad}{{}}"]


class _ShowCompletions:
    """Wraps a policy and prints each completion it returns (``play --show-completions``)."""

    def __init__(self, policy: Policy, label: str):
        self.policy, self.label = policy, label
        self.name = policy.name

    @property
    def tokens_generated(self) -> int | None:
        return self.policy.tokens_generated

    def act(self, conversations: Any, infos: Any) -> list[Any]:
        completions = self.policy.act(conversations, infos)
        for completion in completions:
            print(f"[{self.label}] {completion.text!r}", flush=True)
        return completions


def play_against(config: PlayConfig) -> int:
    """``textgym play textgym/TicTacToe-v0 --against POLICY``: a person against a policy.

    The person sits in seat ``player_0`` and reads the full prompts; the policy sits in
    ``player_1`` and gets the ``--prompt-style`` prompts (compact by default, the style the
    trained tic-tac-toe models saw). Games are played with :func:`textgym.selfplay.selfplay` on
    the two-seat env, one at a time; ``--mark`` picks the person's mark (``random``: drawn
    from the game's seed).

    Raises:
        UsageError: for another env id, ``--env-kwargs`` or ``--wrappers``, or a policy that
            cannot be built.
        SystemExit: (code 2) when PettingZoo or the policy's extras are not installed.
    """
    assert config.against is not None
    if config.env_id != _TWO_SEAT_ENV_ID:
        raise UsageError(
            f"--against plays two-seat tic-tac-toe only; use {_TWO_SEAT_ENV_ID}, "
            f"got {config.env_id!r}"
        )
    given = [
        flag
        for flag, value in (("--env-kwargs", config.env_kwargs), ("--wrappers", config.wrappers))
        if value
    ]
    if given:
        raise UsageError(
            f"{' and '.join(given)} {'does' if len(given) == 1 else 'do'} not apply with "
            "--against; use --mark and --prompt-style"
        )
    try:
        pettingzoo_env = importlib.import_module("textgym.envs.tictactoe.pettingzoo_env")
    except ImportError as exc:
        fail(f'textgym play --against needs PettingZoo ({exc}); pip install "textgym[multiagent]"')
    from textgym.envs.tictactoe.env import TicTacToeEnv
    from textgym.policies.human import HumanPolicy

    stop = TicTacToeEnv.stop_strings  # the answer ends at </move>
    kwargs = building.policy_kwargs(config.against, config, stop, seed=config.seed, batch_size=1)
    model: Policy = building.build_policy(config.against, kwargs)
    if config.show_completions:
        model = _ShowCompletions(model, config.against)
    human = HumanPolicy(action_template=TicTacToeEnv.action_template)
    styles = {"player_0": "full", "player_1": config.prompt_style}

    def make_env() -> Any:
        return pettingzoo_env.env(prompt_style=styles)

    served = getattr(model, "model", None) if config.against == "openai" else None
    who = {"hf": f"hf {config.model}", "openai": f"openai {served or '(first model served)'}"}
    print(
        f"Playing {config.env_id} against {who.get(config.against, config.against)}, which "
        f"sees the {config.prompt_style} prompt. Type a cell number 0-8 and press Enter; "
        "Ctrl-D quits."
    )
    first = {"X": "player_0", "O": "player_1", "random": "random"}[config.mark]
    return _episodes_loop(config, lambda seed: _one_game([human, model], make_env, first, seed))


def _one_game(
    policies: list[Any], make_env: Callable[[], Any], first: str, seed: int | None
) -> tuple[str | None, float]:
    """One game of ``policies[0]`` (the person) against ``policies[1]``; prints the result and
    returns the person's (outcome, return)."""
    from textgym.selfplay import selfplay

    (game,) = selfplay(policies, [seed], batch_size=1, first_player=first, make_env=make_env)
    mine = game.trajectories["player_0"]
    outcome = game.outcomes["player_0"]
    print(f"\n{mine.messages[-1]['content']}\n")
    if outcome is None:
        print(
            f"Result: no result, the game hit the limit of actions per seat "
            f"(you played {game.marks['player_0']})."
        )
        theirs = game.trajectories["player_1"]
        if sum(theirs.invalid_actions):
            print(
                f"The opponent's answers were invalid moves {sum(theirs.invalid_actions)} of "
                f"{len(theirs.invalid_actions)} times; --show-completions prints what it wrote."
            )
    else:
        said = {"win": "you win", "draw": "a draw", "loss": "you lose"}[outcome]
        print(f"Result: {said} (you played {game.marks['player_0']}).")
    return outcome, mine.episode_return
