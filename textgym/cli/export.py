"""``textgym export``: a run's episodes in a standard format, ``RUN --format atif --output FILE``.

RUN is an eval directory (``textgym eval --output-dir``), a train directory (its kept episodes,
``train_episodes.jsonl``) or the JSONL file of ``textgym collect``. ``--format chat`` (the
default) writes the chat-format JSONL that ``textgym collect`` writes and ``textgym sft``
reads; ``--format atif`` writes one ATIF v1.8 trajectory document per line
(:mod:`textgym.atif`: messages, tool calls and their results, per-turn rewards and reward
components, token ids and log-probs where the run kept them; ``pip install "textgym[atif]"``).
The file is written in one step (a temporary file beside it, then a rename); one that already
holds something is refused unless ``--overwrite``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Annotated, Literal

import tyro

from textgym.errors import UsageError

__all__ = ["ExportConfig", "run"]


@dataclasses.dataclass(kw_only=True)
class ExportConfig:
    """Export a run's episodes: chat-format JSONL (the default) or ATIF trajectories."""

    run: Annotated[tyro.conf.Positional[str], tyro.conf.arg(metavar="RUN")]
    """An eval or train run directory, or the JSONL file of textgym collect."""
    output: str
    """The file to write (JSONL: one episode per line)."""
    format: Literal["chat", "atif"] = "chat"
    """chat: the chat-messages JSONL of textgym collect; atif: ATIF v1.8 trajectory documents
    (needs pip install "textgym[atif]")."""
    overwrite: bool = False
    """Replace an --output file that already holds something."""


Config = ExportConfig


def run(config: ExportConfig) -> int:
    """Write the run's episodes to ``--output``; print how many."""
    from textgym.atif import chat_records, export_atif, read_run, require_atif
    from textgym.cli.outputs import claim_file
    from textgym.results import write_lines

    episodes = read_run(config.run)  # SetupError: not a run
    if config.format == "atif":
        require_atif()  # MissingExtraError before a file is claimed
    output = Path(config.output)
    if output.resolve() == episodes.path.resolve():
        raise UsageError(f"--output {output} is the run's own file; choose another --output")
    lines = export_atif(episodes) if config.format == "atif" else chat_records(episodes)
    existed = output.exists()
    try:
        with claim_file(output, "--output", overwrite=config.overwrite) as out:
            count = write_lines(out, lines)
    except BaseException:
        if not existed:  # claim_file created it empty; nothing was written
            with contextlib.suppress(OSError):
                if output.stat().st_size == 0:
                    output.unlink()
        raise
    print(f"{count} {episodes.kind} episodes written to {output} ({config.format})")
    return 0
