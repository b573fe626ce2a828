"""The arguments of ``textgym train`` (:class:`GRPOConfig`) and the checks they pass.

Every field of :class:`GRPOConfig` is an option of the command, its docstring the option's
``--help``. ``__post_init__`` fills the loss type's defaults and runs :data:`_RULES`, a table of
named checks, in order: the first that fails raises ``ValueError`` with the field's name, what
was expected, what was seen and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from textgym.algos.advantages import ScaleRewards
from textgym.algos.checkpoints import check_checkpoint_settings
from textgym.algos.common import OptimizationConfig, check_positive_ints
from textgym.algos.distributed import DistributedContext
from textgym.algos.dynamic_sampling import EXTRA_ROUND_SEEDS, MAX_DYNAMIC_SAMPLING_ROUNDS
from textgym.algos.losses import LOSS_VARIANTS, LossType
from textgym.builder import check_wrapper_names
from textgym.checks import check_seed, check_urls
from textgym.errors import SetupError
from textgym.mixture import members_from_ids

__all__ = ["ROLLOUT_ENGINES", "GRPOConfig", "RolloutEngine", "check_world_size"]

#: Where rollouts may be generated (``rollout_engine``): in this process, or by llama.cpp's server.
ROLLOUT_ENGINES: tuple[str, ...] = ("hf", "llama-server")
#: ``Literal`` of :data:`ROLLOUT_ENGINES` (built from it, so the names are written once).
RolloutEngine = Literal[ROLLOUT_ENGINES]  # type: ignore[valid-type]


@dataclass(kw_only=True)
class GRPOConfig(OptimizationConfig):
    """Arguments of textgym train (GRPO); every field is an option of the command."""

    model: str = "gemma-3-270m"
    """Policy to train: gemma-3-270m, tiny (a small random model for tests), a local directory
    (e.g. the output of textgym sft) or a Hugging Face model id."""
    output_dir: str = "runs/grpo"
    """Directory for checkpoints, metrics.jsonl, TensorBoard logs and plots."""
    env_id: str
    """Registered env to train on (textgym list shows them)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of gymnasium.make for the env (none by default)."""
    mixture: tuple[str, ...] = ()
    """With ENV_ID textgym/Mixture-v0: its members as ID or ID:WEIGHT, space-separated (e.g.
    textgym/TicTacToe-v0:2 textgym/ReverseText-v0), each with its own default kwargs; a
    member's own kwargs or wrappers go in --env-kwargs '{"envs": [...]}' instead."""
    wrappers: tuple[str, ...] = ("invalid_action_penalty",)
    """Reward wrappers applied in order, by name (textgym.wrappers.REWARD_WRAPPERS)."""
    opponent_random_move_prob: tuple[float, float] | None = None
    """Envs with an opponent (tic-tac-toe): the range (low, high) from which each task's
    opponent random-move probability is drawn, stratified over the tasks of a step; 1 is a
    uniformly random opponent, 0 the optimal one (the tic-tac-toe recipe trains on 0.5 1.0).
    None keeps the env's own setting."""
    opponent_priority: Literal["uniform", "loss"] = "uniform"
    """Envs with a list of opponent styles (tic-tac-toe's env_kwargs opponent): uniform lets the
    env draw a style per episode; loss draws one per group, weighted by the policy's recent loss
    rate against each, measured on its own training episodes (prioritised fictitious
    self-play's hard weighting; textgym.algos.league)."""
    dynamic_sampling_rounds: int = 0
    """DAPO's dynamic sampling (textgym.algos.dynamic_sampling): when fewer than M of a step's
    groups have unequal rewards, play up to this many more rounds of M groups (new tasks) and
    update on M informative groups, filling any shortfall with flat ones. 0 turns it off; at
    most 100. Needs rollout_engine hf and one process."""
    expert_guidance: int = 0
    """Expert-guided groups (textgym.algos.expert_guidance): in each group whose G sampled
    episodes earn equal returns, the env's own expert plays the same task, and where it earns
    more its episode replaces this many of the group's (an off-policy demonstration, as in
    LUFFY). 0 turns it off; at most group_size - 1. Needs an env with an expert, rollout_engine
    hf with the learner's own weights, in-process envs and no dynamic sampling."""
    seed: int = 0
    """Seed of tasks, sampling and initialisation; an integer in [0, 2**32 - 1], as for every
    command."""
    steps: int = 100
    """Training steps (one rollout and one update each)."""
    groups_per_step: int = 8
    """Groups per step, M: each group is G episodes of one task (the same seed and opponent)."""
    group_size: int = 8
    """Episodes per task, G (at least 2: a group of one has no baseline)."""
    rollout_batch_size: int = 64
    """Most episodes generated at once (memory, not maths)."""
    env_workers: bool = False
    """Step each env in its own worker process (Gymnasium's AsyncVectorEnv), so a turn's env
    steps run in parallel: for envs whose step is heavy (tool sandboxes); the trajectories are
    the same."""
    env_url: tuple[str, ...] = ()
    """Play the training and evaluation episodes on env servers (textgym serve ENV_ID with the
    same env_kwargs and wrappers), e.g. http://host:8000; several URLs share the episodes (each
    server's max_sessions at least rollout_batch_size over the URLs). The env is still built
    here once, for its stop strings, step limit and evaluation settings."""
    rollout_engine: RolloutEngine = "hf"
    """Where rollouts are generated: hf (in this process, on the learner's model) or
    llama-server (llama.cpp's server, started by the trainer on the base model's GGUF, sent
    prompt token ids and returning sampled ids and log-probs; the LoRA adapter is pushed to it
    after every update: needs lora_rank > 0). With num_iterations 1 the importance ratio is
    taken against the server's log-probs (the behaviour policy)."""
    llama_server: str = ""
    """llama-server binary (empty: $TEXTGYM_LLAMA_SERVER, then PATH)."""
    server_model: str = ""
    """Base model GGUF that llama-server serves (empty: the packaged Gemma 3 270M GGUF, for
    model gemma-3-270m)."""
    server_context_tokens: int = 4096
    """Tokens of context per llama-server slot (one slot per episode in flight): the longest
    episode must fit (a compact tic-tac-toe game is under 1k; a Workplace prompt alone is about
    5k)."""
    async_rollouts: int = 0
    """0: each step's rollouts use the weights of the update before. 1: the next step's
    rollouts run on the server while this step updates, one update behind; the importance
    ratio against the sampler's log-probs corrects for it. Needs rollout_engine llama-server."""
    rollout_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Weights the in-process rollouts and evaluations sample from: bfloat16 (a copy of the
    policy refreshed after every update, merged with LoRA; half the bytes read per decode step;
    the importance ratio is then taken against the sampler's log-probs), float32 (the learner's
    own weights), or auto (bfloat16 on CUDA with bf16 on, else the learner's weights)."""
    max_new_tokens: int = 32
    """Most tokens per completion (per agent turn)."""
    temperature: float = 1.0
    """Sampling temperature; training log-probs use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 turns it off; the surrogate assumes unmodified sampling)."""
    num_iterations: int = 1
    """Optimizer steps per rollout batch (mu); above 1 reuses the batch with stored old
    log-probs."""
    loss_type: LossType = "dapo"
    """Policy loss, a row of the loss table in textgym/algos/losses.py (surrogate, reduction,
    normaliser, default clip range)."""
    scale_rewards: ScaleRewards | None = None
    """Advantage scaling: group (divide by the group's std), batch (by the batch's std) or none;
    None takes the loss type's default (none for dr_grpo, else group)."""
    epsilon_low: float | None = None
    """Clip range below a ratio of 1; None takes the loss type's default (0.2; gspo 3e-4)."""
    epsilon_high: float | None = None
    """Clip range above a ratio of 1; None takes the loss type's default (grpo 0.2, dapo 0.28,
    gspo 4e-4, cispo 5.0)."""
    beta: float = 0.0
    """Weight of the k3 KL penalty to the initial policy (nats per token); 0 loads no reference
    model."""
    share_prefix: bool = True
    """Run the prompt a group's rows share once, in the rollout's prefill and in the update's
    forward pass: the same samples and loss up to float rounding, fewer FLOPs; the update
    ignores it on CUDA, where padded rows measured faster (grpo_update.update_shares_prefix),
    under gradient checkpointing and with micro_batch_tokens (packed rows are the alternative
    to the shared-prompt pass; the rollouts still share prefills)."""
    mask_truncated: bool = False
    """Give no loss to episodes with a completion cut by max_new_tokens (DAPO's overlong
    filtering); they still count in their group's statistics."""
    eval_every: int = 10
    """Evaluate every this many steps (0: only before the first step and at the end)."""
    eval_episodes: int = 100
    """Episodes per evaluation setting (per opponent for tic-tac-toe)."""
    eval_temperature: float = 0.0
    """Sampling temperature of evaluation; 0 decodes greedily."""
    save_every: int = 0
    """Checkpoint every this many steps (0: only at the end, at a time limit or on Ctrl-C)."""
    save_total_limit: int | None = 2
    """Most checkpoint-* folders kept in output_dir (TRL's save_total_limit): the oldest are
    deleted once a new one is complete, and only the newest keeps the optimizer state. None
    keeps all."""
    resume: bool = False
    """Continue from the latest checkpoint in output_dir (refused when it holds none)."""
    time_limit_minutes: float | None = None
    """Wall-clock budget of this invocation in minutes: once it has passed, the run saves its
    last whole step and returns (a later run with resume goes on), giving up a step inside its
    dynamic sampling rounds or cutting an evaluation after a turn. The first step of an
    invocation (and the evaluation before it) always completes, so every resumed invocation
    makes progress. None: no limit."""
    log_completions: int = 2
    """Groups of each step's rollouts kept in output_dir/train_episodes.jsonl (the eval
    trajectory record plus step, group and advantage; textgym report shows them); 0 keeps
    none."""
    dry_run: bool = False
    """Play one step's rollouts without updating, print their diagnostics (reward spread, share
    of groups with equal rewards, invalid rate, entropy) and the hint of why the run would not
    learn, and exit: nothing is written to output_dir."""

    # Derived in __post_init__.
    batch_size: int = field(init=False)
    """M x G episodes per step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mixture:
            spec = {"envs": members_from_ids(self.mixture)}
            if self.env_id != "textgym/Mixture-v0" or self.env_kwargs not in ({}, spec):
                raise SetupError(
                    "mixture: expected ENV_ID textgym/Mixture-v0 and no other --env-kwargs "
                    f"with --mixture, got {self.env_id} and {sorted(self.env_kwargs)}"
                )
            self.env_kwargs = spec  # what run.json records (a replay gives both, equal)
        check_seed("seed", self.seed)
        check_checkpoint_settings(self)
        check_positive_ints(self, _POSITIVE_INTS)
        _check(self, _RULES_BEFORE_DEFAULTS)
        variant = LOSS_VARIANTS[self.loss_type]
        if self.scale_rewards is None:
            self.scale_rewards = variant.scale_rewards[0]
        low, high = variant.epsilons
        self.epsilon_low = low if self.epsilon_low is None else self.epsilon_low
        self.epsilon_high = high if self.epsilon_high is None else self.epsilon_high
        _check(self, _RULES)
        self.batch_size = self.groups_per_step * self.group_size


def check_world_size(config: GRPOConfig, ctx: DistributedContext) -> None:
    """:class:`~textgym.errors.SetupError` unless the step's groups split evenly over the ranks, and, with dynamic
    sampling, there is one rank (the ranks would have to agree on which groups to keep)."""
    if ctx.distributed and config.dynamic_sampling_rounds:
        raise SetupError(
            f"dynamic_sampling_rounds: expected 0 with {ctx.world_size} ranks, got "
            f"{config.dynamic_sampling_rounds}; dynamic sampling runs in one process"
        )
    if config.groups_per_step % ctx.world_size:
        raise SetupError(
            f"groups_per_step: expected a multiple of the {ctx.world_size} ranks (whole groups "
            f"per rank), got {config.groups_per_step}; change groups_per_step or --nproc-per-node"
        )


class _Rule(NamedTuple):
    """One check of :class:`GRPOConfig`: when ``broken(config)``, ``ValueError`` with the
    message ``"{name}: {problem(config)}"``."""

    name: str
    broken: Callable[[GRPOConfig], bool]
    problem: Callable[[GRPOConfig], str]


def _check(config: GRPOConfig, rules: tuple[_Rule, ...]) -> None:
    """Raise :class:`~textgym.errors.SetupError` for the first of ``rules`` that ``config``
    breaks."""
    for rule in rules:
        if rule.broken(config):
            raise SetupError(f"{rule.name}: {rule.problem(config)}")


def _scale_rewards_problem(config: GRPOConfig) -> str:
    variant = LOSS_VARIANTS[config.loss_type]
    allowed = " or ".join(f"scale_rewards={s!r}" for s in variant.scale_rewards)
    return (
        f"{config.loss_type} ({variant.source}) allows only "
        f"{', '.join(variant.scale_rewards)}, got {config.scale_rewards!r}; use {allowed} "
        "or another loss_type"
    )


def _wrapper_problem(config: GRPOConfig) -> str | None:
    """What :func:`~textgym.builder.check_wrapper_names` says of the wrappers (``None``: fine)."""
    try:
        check_wrapper_names(config.wrappers)
    except ValueError as exc:
        return str(exc)
    return None


def _url_problem(config: GRPOConfig) -> str | None:
    """What :func:`~textgym.checks.check_urls` says of ``env_url`` (``None``: fine)."""
    try:
        check_urls("env_url", config.env_url)
    except ValueError as exc:
        return str(exc)
    return None


def _opponent_range_broken(config: GRPOConfig) -> bool:
    prob = config.opponent_random_move_prob
    return prob is not None and not (len(prob) == 2 and 0 <= prob[0] <= prob[1] <= 1)


def _extra_seeds_overflow(config: GRPOConfig) -> bool:
    """Whether a step's or an extra round's task seeds would leave their band
    (:func:`textgym.algos.dynamic_sampling.round_seed`)."""
    own = config.steps * config.groups_per_step
    extra = own * config.dynamic_sampling_rounds
    return bool(config.dynamic_sampling_rounds) and max(own, extra) > EXTRA_ROUND_SEEDS


def _league_problem(config: GRPOConfig) -> str | None:
    """Why ``opponent_priority="loss"`` cannot run with this config (``None``: it can)."""
    if config.opponent_priority == "uniform":
        return None
    styles = config.env_kwargs.get("opponent")
    if not isinstance(styles, list | tuple) or len(set(styles)) < 2:
        return (
            "loss draws among the env's opponent styles: give env_kwargs opponent as a list of "
            f"at least two styles, got {styles!r}"
        )
    if config.rollout_engine != "hf":
        return "loss needs rollout_engine hf (the draw follows the step's own rollouts)"
    return None


def _not_negative(name: str) -> _Rule:
    return _Rule(
        name,
        lambda c: getattr(c, name) < 0,
        lambda c: f"expected >= 0, got {getattr(c, name)}",
    )


_POSITIVE_INTS = (
    "steps",
    "groups_per_step",
    "rollout_batch_size",
    "max_new_tokens",
    "num_iterations",
    "server_context_tokens",
)

#: Checked before the loss type's defaults are filled in (they are looked up by loss type).
_RULES_BEFORE_DEFAULTS = (
    _Rule(
        "group_size",
        lambda c: c.group_size < 2,
        lambda c: (
            f"expected >= 2, got {c.group_size}: a group of one episode has no baseline, "
            "so every advantage would be 0"
        ),
    ),
    _Rule(
        "loss_type",
        lambda c: c.loss_type not in LOSS_VARIANTS,
        lambda c: f"unknown loss_type {c.loss_type!r}; expected one of {', '.join(LOSS_VARIANTS)}",
    ),
)

#: The other checks, in the order they run.
_RULES = (
    _Rule(
        "scale_rewards",
        lambda c: c.scale_rewards not in LOSS_VARIANTS[c.loss_type].scale_rewards,
        _scale_rewards_problem,
    ),
    *(_not_negative(name) for name in ("epsilon_low", "epsilon_high", "eval_temperature", "beta")),
    _not_negative("log_completions"),
    _not_negative("dynamic_sampling_rounds"),
    _Rule(
        "dynamic_sampling_rounds",
        lambda c: c.dynamic_sampling_rounds > MAX_DYNAMIC_SAMPLING_ROUNDS,
        lambda c: (
            f"expected at most {MAX_DYNAMIC_SAMPLING_ROUNDS} extra rounds a step, got "
            f"{c.dynamic_sampling_rounds}; groups that stay flat that long need another task, "
            "temperature or group_size"
        ),
    ),
    _Rule(
        "dynamic_sampling_rounds",
        lambda c: bool(c.dynamic_sampling_rounds) and c.rollout_engine != "hf",
        lambda c: "needs rollout_engine hf (the extra rounds follow the step's own rollouts)",
    ),
    _Rule(
        "dynamic_sampling_rounds",
        _extra_seeds_overflow,
        lambda c: (
            f"expected steps x groups_per_step ({c.steps} x {c.groups_per_step}) and that times "
            f"dynamic_sampling_rounds ({c.dynamic_sampling_rounds}) each <= "
            f"{EXTRA_ROUND_SEEDS:,}, the task seeds each kind of round has; use fewer steps or "
            "rounds"
        ),
    ),
    _not_negative("expert_guidance"),
    _Rule(
        "expert_guidance",
        lambda c: c.expert_guidance >= c.group_size,
        lambda c: (
            f"expected at most group_size - 1 ({c.group_size - 1}) expert episodes a group, got "
            f"{c.expert_guidance}: the group needs a sampled episode to learn from"
        ),
    ),
    _Rule(
        "expert_guidance",
        lambda c: (
            bool(c.expert_guidance) and (c.rollout_engine != "hf" or c.rollout_dtype == "bfloat16")
        ),
        lambda c: (
            "needs rollout_engine hf sampling the learner's own weights (the expert's tokens "
            "have no sampling log-probs for a ratio against other weights)"
        ),
    ),
    _Rule(
        "expert_guidance",
        lambda c: bool(c.expert_guidance) and bool(c.dynamic_sampling_rounds),
        lambda c: "choose one remedy for flat groups: expert_guidance or dynamic_sampling_rounds",
    ),
    _Rule(
        "expert_guidance",
        lambda c: bool(c.expert_guidance) and bool(c.env_url),
        lambda c: "the expert plays the env in this process; drop env_url",
    ),
    _Rule(
        "temperature",
        lambda c: c.temperature <= 0,
        lambda c: f"expected > 0 for GRPO sampling, got {c.temperature}",
    ),
    _Rule(
        "top_p",
        lambda c: not 0 < c.top_p <= 1,
        lambda c: f"expected a value in (0, 1], got {c.top_p}",
    ),
    _Rule(
        "time_limit_minutes",
        lambda c: c.time_limit_minutes is not None and c.time_limit_minutes <= 0,
        lambda c: f"expected > 0 or None, got {c.time_limit_minutes}",
    ),
    _Rule("wrappers", lambda c: _wrapper_problem(c) is not None, _wrapper_problem),
    _Rule("opponent_priority", lambda c: _league_problem(c) is not None, _league_problem),
    _Rule(
        "opponent_random_move_prob",
        _opponent_range_broken,
        lambda c: (
            f"expected (low, high) with 0 <= low <= high <= 1, got {c.opponent_random_move_prob}"
        ),
    ),
    _Rule("env_url", lambda c: _url_problem(c) is not None, lambda c: _url_problem(c) or ""),
    _Rule(
        "env_url",
        lambda c: bool(c.env_url) and c.opponent_random_move_prob is not None,
        lambda c: (
            "the opponent range is drawn by a wrapper in this process, which a served env "
            "does not have; drop opponent_random_move_prob or play the env in process"
        ),
    ),
    _Rule(
        "env_url",
        lambda c: bool(c.env_url) and c.env_workers,
        lambda c: "the env servers step the envs already; drop env_workers",
    ),
    _Rule(
        "rollout_engine",
        lambda c: c.rollout_engine not in ROLLOUT_ENGINES,
        lambda c: f"expected {' or '.join(ROLLOUT_ENGINES)}, got {c.rollout_engine!r}",
    ),
    _Rule(
        "async_rollouts",
        lambda c: c.async_rollouts not in (0, 1),
        lambda c: f"expected 0 or 1, got {c.async_rollouts}",
    ),
    _Rule(
        "async_rollouts",
        lambda c: bool(c.async_rollouts) and c.rollout_engine == "hf",
        lambda c: (
            "1 needs rollout_engine llama-server (in process, the rollout and the update "
            "would share one model while it changes)"
        ),
    ),
    _Rule(
        "rollout_engine",
        lambda c: c.rollout_engine == "llama-server" and c.lora_rank <= 0,
        lambda c: "llama-server receives the trained weights as a LoRA adapter; set lora_rank > 0",
    ),
)
