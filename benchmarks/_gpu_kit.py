"""What the GPU machine's runs need beside the parts themselves: a command run under a time
cap with its whole process group (``gpu_suite.py --quick`` and ``gpu_learn.py``), and Gemma 3
270M's config and tokenizer without its weights (``gpu_suite.py --prep``, unpacked by
``--quick --random-weights --model FOLDER``), small enough to travel to that machine.
"""

from __future__ import annotations

import lzma
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from _provenance import REPO_ROOT  # sibling module


def run_capped(
    command: list[str], log: Path, cap: float, env: dict[str, str] | None = None
) -> tuple[int | None, float]:
    """Run ``command`` in its own process group with its output in ``log``; on reaching ``cap``
    seconds the whole group (the benchmark's children too) is terminated, then killed.

    ``env`` is the child's environment (default: this process's).

    Returns:
        ``(exit status or None when it ran out of time, seconds)``.
    """
    began = time.perf_counter()
    with log.open("w") as handle:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        try:
            returncode: int | None = process.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            returncode = None
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            process.wait()
    return returncode, time.perf_counter() - began


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
_MODEL_FILES = ("config.json", "generation_config.json", *_TOKENIZER_FILES)


def prep_model_files(target: Path) -> None:
    """Write Gemma 3 270M's config and tokenizer (no weights) to ``target``, the tokenizer as
    ``tokenizer.json.xz`` (33 MB -> 3.4 MB), for ``--quick --random-weights --model
    target`` on a machine without the weights. Converts the packaged GGUF once if needed."""
    from textgym.gemma import default_cache_dir
    from textgym.models import load_model

    cache = default_cache_dir() / "gemma-3-270m"
    if not (cache / "config.json").is_file():
        load_model("gemma-3-270m")  # converts the packaged GGUF into the cache
    target.mkdir(parents=True, exist_ok=True)
    for name in _MODEL_FILES:
        if name != "tokenizer.json" and (cache / name).is_file():
            shutil.copyfile(cache / name, target / name)
    xz = lzma.compress((cache / "tokenizer.json").read_bytes(), preset=6)
    (target / "tokenizer.json.xz").write_bytes(xz)
    size = sum(f.stat().st_size for f in target.iterdir()) / 2**20
    print(f"wrote {target}: config and tokenizer, {size:.1f} MiB")


def unpack_tokenizer(model: str) -> None:
    """Decompress ``tokenizer.json.xz`` in a model folder that lacks ``tokenizer.json``."""
    folder = Path(model)
    packed = folder / "tokenizer.json.xz"
    if packed.is_file() and not (folder / "tokenizer.json").exists():
        (folder / "tokenizer.json").write_bytes(lzma.decompress(packed.read_bytes()))
        print(f"unpacked {packed}")
