"""Servers: inference servers that generate rollouts outside the training process, and envs
served to clients on other machines.

:mod:`textgym.serving.llama_cpp` runs llama.cpp's ``llama-server`` as a subprocess and writes a
``peft`` LoRA adapter as the GGUF adapter file it loads, which is how the GRPO trainer pushes
updated weights to the server between steps (``rollout_engine="llama-server"``).

:mod:`textgym.serving.openenv_server` serves any text env through OpenEnv (``textgym serve``,
the ``serve`` extra) and :mod:`textgym.serving.client` plays a served env as a
``gymnasium.Env[str, str]`` (``--env-url``).
"""
