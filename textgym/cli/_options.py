"""The option groups that several subcommands share, as config dataclasses.

Each field is one option (``--field-name``); its docstring is the option's help
(:mod:`textgym.cli.usage` describes the grammar). A subcommand's config inherits the groups
it takes and calls their ``check`` methods from its ``__post_init__``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from textgym.checks import check_seed
from textgym.errors import SetupError
from textgym.models import DType

__all__ = [
    "DEFAULT_EPISODES",
    "DEFAULT_MODEL",
    "EnvOptions",
    "EnvUrlOptions",
    "EpisodeOptions",
    "ModelOptions",
    "PolicyOptions",
    "split_list",
]

#: The default model of every subcommand that loads one.
DEFAULT_MODEL = "gemma-3-270m"

#: Episodes on an env without a task list, or with ``--sample-tasks``.
DEFAULT_EPISODES = 100

#: textgym.builder.policy_names() but human, and "expert": the env's own, whatever its name
#: (an env outside textgym brings its expert through TextEnv.make_expert, not this list).
PolicyName = Literal["expert", "minimax", "lookup_expert", "random", "gold", "hf", "openai"]


def split_list(values: tuple[str, ...] | None) -> list[str] | None:
    """Space-separated values of a list option; a comma inside a value also separates (the
    spelling ``--task-ids a,b`` of earlier versions)."""
    if values is None:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


@dataclass(kw_only=True)
class EnvUrlOptions:
    """Where the episodes are played: in this process, or on env servers."""

    env_url: tuple[str, ...] = ()
    """Play the episodes on env servers (textgym serve ENV_ID, same --env-kwargs and
    --wrappers), e.g. http://host:8000; several URLs share the episodes."""


@dataclass(kw_only=True)
class EnvOptions:
    """The env: its id, keyword arguments and reward wrappers."""

    env_id: str
    """Registered Gymnasium id: a textgym id (textgym list), 'module:EnvName-v0' (the module is
    imported first and registers the id), or an id a package registers through the
    'textgym.envs' entry point."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of gymnasium.make as a JSON object, e.g. '{"data_path": "x.jsonl"}'."""
    wrappers: tuple[str, ...] = ()
    """Reward wrappers applied in order, space-separated (textgym.wrappers.REWARD_WRAPPERS)."""

    def check_env(self) -> None:
        """Split comma-joined wrapper names (the spelling of earlier versions)."""
        self.wrappers = tuple(split_list(self.wrappers) or ())


@dataclass(kw_only=True)
class ModelOptions:
    """The model behind an ``hf`` or ``openai`` policy, and how it samples."""

    model: str = DEFAULT_MODEL
    """hf: 'tiny', 'gemma-3-270m', a Hugging Face id, or a local model or LoRA adapter directory;
    openai: a served model name (the default name means the first model served)."""
    base_url: tuple[str, ...] = ("http://127.0.0.1:8000/v1",)
    """openai: endpoint URLs, space-separated; requests are spread over them."""
    dtype: DType = "auto"
    """hf: dtype of the weights; auto: bfloat16 where the CPU/GPU computes it natively, else
    float32."""
    max_new_tokens: int = 256
    """Most tokens per completion (per turn)."""
    temperature: float = 0.7
    """Sampling temperature (0: greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 turns it off)."""

    def check_sampling(self) -> None:
        """Refuse sampling options out of range, whatever the policy (a scripted policy does not
        sample, but a value no policy could use is a mistake worth saying).

        Raises:
            ValueError: naming the option.
        """
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise SetupError(
                f"--temperature must be a finite number >= 0 (0: greedy), got {self.temperature}"
            )
        if not 0 < self.top_p <= 1:  # NaN fails too
            raise SetupError(
                f"--top-p must be in (0, 1] (1 turns nucleus sampling off), got {self.top_p}"
            )
        if self.max_new_tokens < 1:
            raise SetupError(
                f"--max-new-tokens must be >= 1 (tokens per completion), got {self.max_new_tokens}"
            )

    def served_model(self) -> str | None:
        """``--model`` for an openai endpoint: ``None`` (the first served) when left default."""
        return None if self.model == DEFAULT_MODEL else self.model


@dataclass(kw_only=True)
class PolicyOptions(ModelOptions):
    """The policy that plays: a scripted expert, the gold answers, a local or served LLM."""

    policy: PolicyName | None = None
    """expert: the env's expert (textgym.TextEnv.expert_policy): minimax on TicTacToe,
    lookup_expert on EmailToolUse (it looks ids and addresses up before it writes), gold on
    another env with reference solutions; random: a random action of the env's grammar (a
    floor on every env); minimax, lookup_expert: those experts by name; gold: an env's
    reference solutions (GSM8K, ReverseText, Workplace, EmailToolUse); hf a local model;
    openai an OpenAI-compatible endpoint (None: the env's expert, else random)."""
    reasoning: bool = True
    """random/minimax: write a <think> block before <move>N</move>."""
    minimax_style: str = "minimax"
    """minimax: its candidate moves, an optimal style (minimax, minimax_last, minimax_any,
    safe_best: the optimal moves that beat weak players most, fork)."""
    minimax_tie_break: Literal["uniform", "first"] = "uniform"
    """minimax: draw among the candidate moves (uniform) or always play the first (one answer
    per position, as SFT data)."""
    concurrency: int | None = None
    """openai: most requests in flight at once (None: 8)."""
    timeout_s: float | None = None
    """openai: seconds one attempt of a request may take (None: 120)."""
    max_retries: int | None = None
    """openai: retries of a request after a transient failure (None: 3)."""
    api_key: str | None = None
    """openai: bearer token (None: $OPENAI_API_KEY, which keeps it out of the process list,
    else 'EMPTY')."""
    tool_format: Literal["native", "text"] | None = None
    """openai, tool envs: native sends the tools with every request and the history as
    structured tool calls; text sends the calls and results as text, for models without native
    tool calling (None: native)."""

    def openai_options(self) -> dict[str, Any]:
        """The ``OpenAIPolicy`` arguments of the openai-only options that were given."""
        given = {
            "max_concurrency": self.concurrency,
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "api_key": self.api_key,
            "tool_format": self.tool_format,
        }
        return {name: value for name, value in given.items() if value is not None}

    def check_policy(self) -> None:
        """Refuse the openai-only options with another policy, and out-of-range values (the
        sampling options' too, :meth:`ModelOptions.check_sampling`).

        Raises:
            ValueError: naming the option.
        """
        self.check_sampling()
        flags = ("concurrency", "timeout_s", "max_retries", "api_key", "tool_format")
        given = [f"--{f.replace('_', '-')}" for f in flags if getattr(self, f) is not None]
        if given and self.policy != "openai":
            got = f"--policy {self.policy}" if self.policy else "no --policy"
            raise SetupError(f"{', '.join(given)} only apply to --policy openai, got {got}")
        if self.concurrency is not None and self.concurrency < 1:
            raise SetupError(
                f"--concurrency must be >= 1 (requests in flight), got {self.concurrency}"
            )
        if self.timeout_s is not None and not (
            math.isfinite(self.timeout_s) and self.timeout_s > 0
        ):
            raise SetupError(
                f"--timeout-s must be a finite number > 0 (seconds per attempt), got {self.timeout_s}"
            )
        if self.max_retries is not None and self.max_retries < 0:
            raise SetupError(f"--max-retries must be >= 0, got {self.max_retries}")


@dataclass(kw_only=True)
class EpisodeOptions:
    """Which episodes are played: the tasks, seeds, groups and how many run at once."""

    episodes: int | None = None
    """Episodes to play (None: 100, or on an env with a task list - GSM8K, ReverseText,
    Workplace - one pass over the tasks; N episodes then walk them in order, from the first
    again after the last)."""
    limit: int | None = None
    """Play only the first N tasks (of the env's list, or of --task-ids; on an env without a
    task list, the N seeds --seed, --seed + 1, ...)."""
    task_ids: tuple[str, ...] | None = None
    """Task ids to play, space-separated, in this order (any env whose reset takes
    options['task_id'])."""
    rollouts_per_task: int = 1
    """Play each task K times (consecutive episodes sharing one seed, as a GRPO group does) and
    report pass@K and mean@K. On an env without a task list (TicTacToe, EmailToolUse) each seed
    is a task: K rollouts of each of --limit seeds (default 100)."""
    success_threshold: float = 1.0
    """An episode succeeds (for pass@k) when its task component (correct, lcs or outcome; the
    return for an env without one) is >= this; 1.0: a right answer, an exact reversal, a win,
    matching tables."""
    sample_tasks: bool = False
    """Draw each seed's task at random, with replacement (as for training), instead of
    walking the task list; --episodes counts them (or --limit seeds of --rollouts-per-task
    episodes each)."""
    seed: int = 0
    """Task g (its --rollouts-per-task episodes) is reset with seed + g; an integer in
    [0, 2**32 - 1], as for every command."""
    group_size: int | None = None
    """Removed: use --rollouts-per-task K (K episodes of each task, or of each seed, sharing one
    seed)."""
    rollout_batch_size: int = 32
    """Episodes in flight at once (and sequences per generate call of an hf policy)."""
    progress: bool = True
    """Show a progress bar."""

    def check_episodes(self) -> None:
        """Refuse counts out of range and task options that contradict each other.

        Raises:
            SetupError: naming the option.
        """
        if self.episodes is not None and not 1 <= self.episodes <= sys.maxsize:
            raise SetupError(f"--episodes must be at least 1 and below 2**63, got {self.episodes}")
        for name, value, low in (
            ("rollout_batch_size", self.rollout_batch_size, 1),
            ("rollouts_per_task", self.rollouts_per_task, 1),
        ):
            if value < low:
                raise SetupError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
        if self.group_size is not None:
            raise SetupError(
                f"--group-size is now --rollouts-per-task: use --rollouts-per-task "
                f"{self.group_size} (each task, or each seed on an env without a task list, "
                f"played {self.group_size} times with one seed), with --limit N for N tasks"
            )
        check_seed("--seed", self.seed)
        if self.limit is not None and self.limit < 1:
            raise SetupError(f"--limit must be >= 1, got {self.limit}")
        if not math.isfinite(self.success_threshold):
            raise SetupError(
                f"--success-threshold must be a finite number, got {self.success_threshold}"
            )
        if self.sample_tasks and self.task_ids is not None:
            raise SetupError(
                "--sample-tasks draws each seed's task at random; it cannot be combined with "
                "--task-ids, which walks the listed tasks in order"
            )
        if self.rollouts_per_task > 1 and self.episodes is not None:
            raise SetupError(
                f"--episodes and --rollouts-per-task {self.rollouts_per_task} both set "
                "the number of episodes; give --rollouts-per-task (with --limit N for the "
                "first N tasks, or N seeds on an env without a task list, or --task-ids)"
            )
