"""Generated email tasks: the seeded generator (:mod:`.generator`) and the Gymnasium env
:class:`EmailToolUseEnv`, which reuses Workplace-v1's email tools, sandbox and verifier."""

from textgym.envs.email_tool_use.env import EmailToolUseEnv
from textgym.envs.email_tool_use.generator import EmailTask, generate_task

__all__ = ["EmailTask", "EmailToolUseEnv", "generate_task"]
