"""GSM8K: final-answer parsing (:mod:`.parsing`), reward terms (:mod:`.rewards`), the bundled
smoke-test set ``sample.jsonl`` and the Gymnasium env :class:`GSM8KEnv`."""

from textgym.envs.gsm8k.env import GSM8KEnv, GSM8KProblem, load_problems

__all__ = ["GSM8KEnv", "GSM8KProblem", "load_problems"]
