"""Workplace tool use (WorkBench / NeMo Gym ``workplace_assistant``): the sandbox
(:mod:`.sandbox`), the 27 tools (:mod:`.tools`), tool-call parsing (:mod:`textgym.toolcalls`, in core),
state verification (:mod:`.verify`), data loading (:mod:`.dataset`), the bundled ``sample/``
workplace and the Gymnasium env :class:`WorkplaceEnv`."""

from textgym.envs.workplace.dataset import WorkplaceData, WorkplaceTask, load_workplace
from textgym.envs.workplace.env import ToolUseEnv, WorkplaceEnv

__all__ = ["ToolUseEnv", "WorkplaceData", "WorkplaceEnv", "WorkplaceTask", "load_workplace"]
