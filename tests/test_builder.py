"""textgym.builder: recipes build the stacks the CLI and trainers use, refuse bad parts in one
line, accept any registered Gymnasium id, and every stack they build survives
``gymnasium.make(env.spec)``."""

from __future__ import annotations

import itertools
import pickle
import sys
import textwrap

import gymnasium as gym
import pytest

import textgym
from textgym.builder import EnvRecipe, env_factory
from textgym.wrappers import (
    REWARD_WRAPPERS,
    FormatReward,
    InvalidActionPenalty,
    StratifiedOpponent,
)

TEXTGYM_IDS = list(textgym.ENV_DESCRIPTIONS)
WRAPPER_ORDERS = [
    order
    for n in range(len(REWARD_WRAPPERS) + 1)
    for order in itertools.permutations(REWARD_WRAPPERS, n)
]


def stack(env: gym.Env) -> list[tuple[type, dict | None]]:
    """The wrapper chain from the outside in: each type and its recorded constructor kwargs."""
    layers = []
    while isinstance(env, gym.Wrapper):
        kwargs = getattr(env, "_saved_kwargs", None)
        layers.append((type(env), None if kwargs is None else dict(kwargs)))
        env = env.env
    layers.append((type(env), None))
    return layers


def test_make_builds_opponent_inside_then_wrappers_in_order():
    recipe = EnvRecipe(
        "textgym/TicTacToe-v0",
        env_kwargs={"agent_mark": "O"},
        wrappers=("format_reward", "invalid_action_penalty"),
        opponent_random_move_prob=(0.25, 0.75),
        groups=4,
    )
    env = recipe.make()
    assert isinstance(env, InvalidActionPenalty)
    assert isinstance(env.env, FormatReward)
    assert isinstance(env.env.env, StratifiedOpponent)
    assert (env.env.env.low, env.env.env.high, env.env.env.groups) == (0.25, 0.75, 4)
    _, info = env.reset(seed=0)
    assert info["agent_mark"] == "O" and 0.25 <= info["random_move_prob"] <= 0.75


def test_recipe_copies_and_normalises_its_fields():
    kwargs = {"agent_mark": "O"}
    recipe = EnvRecipe("textgym/TicTacToe-v0", kwargs, ["invalid_action_penalty"], [0, 1])
    kwargs["agent_mark"] = "X"
    assert recipe.env_kwargs == {"agent_mark": "O"}
    assert recipe.wrappers == ("invalid_action_penalty",)
    assert recipe.opponent_random_move_prob == (0.0, 1.0)
    assert pickle.loads(pickle.dumps(recipe)) == recipe  # a subprocess vector env can take it


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"env_id": ""}, "env_id"),
        ({"env_kwargs": ["agent_mark", "O"]}, "env_kwargs"),
        ({"wrappers": "format_reward"}, "sequence of names"),
        ({"wrappers": ("format_reward", "chat")}, "unknown wrapper 'chat'; expected any of"),
        ({"opponent_random_move_prob": (0.8, 0.2)}, r"0 <= low <= high <= 1, got \(0.8, 0.2\)"),
        ({"opponent_random_move_prob": (0.0, 1.5)}, "low <= high"),
        ({"opponent_random_move_prob": 0.5}, "low <= high"),
        ({"groups": 0}, "groups to be an int >= 1"),
        ({"groups": True}, "groups"),
    ],
)
def test_recipe_refuses_malformed_fields(fields, message):
    with pytest.raises(ValueError, match=message):
        EnvRecipe(**{"env_id": "textgym/TicTacToe-v0", **fields})


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        (EnvRecipe("textgym/Chess-v0"), "unknown env id 'textgym/Chess-v0'; expected"),
        (EnvRecipe("no_such_module_xyz:Foo-v0"), "cannot import module 'no_such_module_xyz'"),
        (EnvRecipe("CartPole-v1"), "CartPoleEnv, whose spaces are not text"),
        (
            EnvRecipe("textgym/TicTacToe-v0", {"random_move_prob": 2}),
            r"cannot make textgym/TicTacToe-v0 with \{\"random_move_prob\": 2\}: Expected "
            r"random_move_prob in \[0, 1\], got 2",
        ),
        (
            EnvRecipe("textgym/TicTacToe-v0", {"colour": "red"}),
            "cannot make textgym/TicTacToe-v0 with .*unexpected keyword argument 'colour'",
        ),
        (
            EnvRecipe("textgym/GSM8K-v0", {"data_path": "/nowhere/test.jsonl"}),
            "cannot make textgym/GSM8K-v0 .*nowhere",
        ),
        (
            EnvRecipe("textgym/GSM8K-v0", opponent_random_move_prob=(0.0, 1.0)),
            "textgym/GSM8K-v0 has no seeded opponent to stratify",
        ),
        (
            EnvRecipe("textgym/ReverseText-v0", wrappers=("format_reward",)),
            "cannot wrap textgym/ReverseText-v0 in format_reward: ReverseTextEnv already pays",
        ),
        (
            EnvRecipe("textgym/Workplace-v1", wrappers=("format_reward",)),
            "cannot wrap textgym/Workplace-v1 in format_reward: WorkplaceEnv has no is_well_formed",
        ),
    ],
)
def test_env_factory_names_the_bad_part_in_one_line(recipe, message):
    with pytest.raises(ValueError, match=message) as caught:
        env_factory(recipe)
    assert "\n" not in str(caught.value)


def test_env_factory_returns_a_factory_and_a_probe_to_read_the_contract_from():
    make_env, probe = env_factory(
        EnvRecipe("textgym/GSM8K-v0", wrappers=("invalid_action_penalty",))
    )
    base = probe.unwrapped
    assert base.task_ids[0] == "gsm8k-sample-00000" and base.format_weight == 0.1
    assert base.has_gold_completion and not base.has_opponent and base.stop_strings == ()
    assert dict(base.evaluation_settings) == {} and base.is_well_formed("#### 4")
    probe.close()
    assert isinstance(make_env(), InvalidActionPenalty)
    assert make_env() is not make_env()


@pytest.fixture
def capital_module(tmp_path, monkeypatch):
    """A user's package that registers its own env when imported (not a textgym/ id)."""
    (tmp_path / "capital_envs.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            from textgym.envs.single_turn import Grade, SingleTurnEnv

            CAPITALS = {"France": "Paris", "Peru": "Lima"}

            class Capital(SingleTurnEnv):
                system_prompt = "Answer with the city."
                has_gold_completion = True

                def __init__(self, format_weight=0.0, render_mode=None):
                    super().__init__(list(CAPITALS), format_weight=format_weight,
                                     render_mode=render_mode)

                def prompt(self, index):
                    country = self.task_ids[index]
                    return f"Capital of {country}?", {"gold_completion": CAPITALS[country]}

                def grade(self, index, action):
                    right = action is not None and action.strip() == CAPITALS[self.task_ids[index]]
                    return Grade("Right." if right else "Wrong.", {"correct": float(right)})

            if "mypkg/Capital-v0" not in gym.registry:
                gym.register("mypkg/Capital-v0", entry_point=Capital)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "capital_envs"
    sys.modules.pop("capital_envs", None)
    gym.registry.pop("mypkg/Capital-v0", None)


def test_any_registered_id_in_the_module_colon_form(capital_module):
    make_env, probe = env_factory(
        EnvRecipe(f"{capital_module}:mypkg/Capital-v0", wrappers=("invalid_action_penalty",))
    )
    assert probe.unwrapped.task_ids == ("France", "Peru")
    probe.close()
    env = make_env()
    obs, info = env.reset(options={"task_id": "Peru"})
    assert obs == "Capital of Peru?"
    assert env.step(info["gold_completion"])[1] == 1.0
    # once imported, the plain id works too
    assert env_factory(EnvRecipe("mypkg/Capital-v0"))[1].unwrapped.task_ids[0] == "France"


def buildable_recipes() -> list[EnvRecipe]:
    """Every stack the builder can build from the wrapper table, on every textgym env."""
    recipes = []
    for env_id, wrappers in itertools.product(TEXTGYM_IDS, WRAPPER_ORDERS):
        for opponent in (None, (0.2, 0.8)):
            recipe = EnvRecipe(
                env_id, wrappers=wrappers, opponent_random_move_prob=opponent, groups=3
            )
            try:
                env_factory(recipe)[1].close()
            except ValueError:
                continue  # a stack the builder refuses (format twice, no opponent, ...)
            recipes.append(recipe)
    return recipes


RECIPES = buildable_recipes()


def test_the_builder_builds_stacks_on_every_env():
    assert {r.env_id for r in RECIPES} == set(TEXTGYM_IDS)
    assert any(r.opponent_random_move_prob and len(r.wrappers) == 2 for r in RECIPES)


@pytest.mark.parametrize(
    "recipe",
    RECIPES,
    ids=lambda r: f"{r.env_id}-{'+'.join(r.wrappers)}-{r.opponent_random_move_prob}",
)
def test_gym_make_of_the_spec_rebuilds_an_equal_stack(recipe):
    env = recipe.make()
    rebuilt = gym.make(env.spec)
    assert stack(rebuilt) == stack(env)
    assert [w.name for w in rebuilt.spec.additional_wrappers] == [
        w.name for w in env.spec.additional_wrappers
    ]
    for seed in (0, 5):
        assert rebuilt.reset(seed=seed) == env.reset(seed=seed)


def test_an_old_version_names_the_current_one():
    with pytest.raises(
        ValueError, match=r"'textgym/Workplace-v0' is not registered, but textgym/Workplace-v1 is"
    ):
        env_factory(EnvRecipe("textgym/Workplace-v0"))
