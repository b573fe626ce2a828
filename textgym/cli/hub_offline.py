"""Fail fast on a Hugging Face hub model id when the hub cannot be reached.

Offline, ``huggingface_hub`` retries each request with back-off before it gives up: loading a
hub id that is not cached (``--model gpt2``) took about 80 s and printed ten ``Retrying``
lines before the loader's one-line error. Before a subcommand that loads ``--model`` from
the hub runs, :func:`offline_unless_reachable` tries one TCP connection to the hub (a few
seconds at most); when it fails, the hub's offline mode is switched on (``HF_HUB_OFFLINE=1``),
so a cached model still loads and one that is not fails at once with the loader's message.

Nothing is probed for a built-in model name, a local path, a policy that loads no model, when
``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is already set (either way), or when a proxy is
configured (the direct connection says nothing then).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["hub_model", "offline_unless_reachable"]

#: Seconds the probe's connection may take.
PROBE_TIMEOUT_S = 3.0

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def hub_model(config: Any) -> str | None:
    """The ``--model`` a subcommand's config would load from the hub, or ``None``: the
    ``hf`` policy of ``eval``/``collect`` (``--policy hf``) and ``play`` (``--against hf``),
    and the trainers' model (configs without a policy); never a built-in name or a path that
    exists."""
    from textgym.models import MODEL_NAMES

    model = getattr(config, "model", None)
    if not isinstance(model, str) or model in MODEL_NAMES:
        return None
    for option in ("policy", "against"):
        if hasattr(config, option) and getattr(config, option) != "hf":
            return None
    if Path(model).expanduser().exists():
        return None
    return model


def offline_unless_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Switch the hub's offline mode on when its endpoint cannot be reached (see the module
    docstring); return whether it was switched on. Call it only when a hub id is about to be
    loaded (:func:`hub_model`).

    Args:
        timeout_s: Seconds the TCP connection may take.
    """
    offline_variables = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    if any(os.environ.get(name) for name in offline_variables + PROXY_VARIABLES):
        return False
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return False
    except OSError:  # no DNS, no route, refused, timed out
        pass
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # imported already: it read the variable at import
        constants.HF_HUB_OFFLINE = True
    return True
