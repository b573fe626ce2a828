"""What ``textgym sft`` and ``textgym train`` share: the checks before training starts.

What can be checked before training starts is, and is reported as a usage error: the config's
own validation (at parse time), the env, wrappers and kwargs (``train``), the output directory,
and the errors of loading the model or reading the data.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textgym.cli import _common
from textgym.cli._common import UsageError, json_safe, one_line, raised_in

__all__ = ["run_trainer"]


def run_trainer(config: Any, train: Callable[[Any], dict[str, Any]]) -> int:
    """Check what can be checked, run ``train(config)`` and print its result as JSON.

    Raises:
        UsageError: an env that cannot be made, an output directory that cannot be written,
            a model or data file that cannot be loaded, a resume that is refused.
    """
    from textgym.algos.common import check_resumable
    from textgym.algos.distributed import shutdown_distributed
    from textgym.algos.server_rollouts import gguf_architecture, server_model_path
    from textgym.algos.sft import read_conversations
    from textgym.data import read_jsonl
    from textgym.models import load_model
    from textgym.results import check_dir
    from textgym.serving.llama_cpp import find_llama_server

    env_id = getattr(config, "env_id", None)  # train has an env; sft has none
    if env_id is not None:  # build the env once, as train will
        _, probe = _common.env_factory(env_id, dict(config.env_kwargs), list(config.wrappers))
        probe.close()
    try:
        check_dir(Path(config.output_dir), "--output-dir")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        result = train(config)
    except (ValueError, OSError, ImportError) as exc:
        # Raised while loading the model or the data, or refusing a resume: before training.
        # Or while preparing the rollout server: no binary, no base model GGUF.
        setup = (load_model, read_jsonl, check_resumable, read_conversations)
        setup += (find_llama_server, server_model_path, gguf_architecture)
        if raised_in(exc, *setup):
            raise UsageError(one_line(exc)) from None
        raise
    shutdown_distributed()  # under torchrun: the ranks leave together (a no-op otherwise)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 reports the run
        print(json.dumps(json_safe(result), indent=2))
    return 0
