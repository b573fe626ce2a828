"""Inference servers that generate rollouts outside the training process.

:mod:`textgym.serving.llama_cpp` runs llama.cpp's ``llama-server`` as a subprocess and writes a
``peft`` LoRA adapter as the GGUF adapter file it loads, which is how the GRPO trainer pushes
updated weights to the server between steps (``rollout_engine="llama-server"``).
"""
