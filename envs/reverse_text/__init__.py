"""Reverse text: tag parsing (:mod:`.parsing`), LCS and format reward terms (:mod:`.rewards`), the
bundled corpus ``corpus.txt`` and the Gymnasium env :class:`ReverseTextEnv`."""

from textgym.envs.reverse_text.env import Passage, ReverseTextEnv, load_passages

__all__ = ["Passage", "ReverseTextEnv", "load_passages"]
