"""The errors textgym raises for problems it can explain in one line.

Every class here is raised where the problem is detected; ``textgym.cli.main`` prints any
:class:`TextgymError` that reaches it as one ``textgym: error:`` line and exits with the
class's :attr:`~TextgymError.exit_code`, so the command line never sorts errors by where they
were raised. An exception outside this hierarchy is a bug and keeps its traceback.

Each class also derives from the built-in exception its callers caught before it existed
(``ValueError`` for bad input, ``ImportError`` for a missing extra, ``OSError`` for files), so
``except ValueError`` keeps working. Errors of one subsystem subclass these where they live
(:class:`~textgym.model_files.ModelLoadError`,
:class:`~textgym.algos.checkpoint_layout.CheckpointError`,
:class:`~textgym.policies.openai_http.InvalidResponseError`, ...).
"""

from __future__ import annotations

__all__ = [
    "EndpointError",
    "MissingExtraError",
    "NonFiniteError",
    "OutputWriteError",
    "SetupError",
    "TextgymError",
    "UsageError",
]


class TextgymError(Exception):
    """A problem textgym detected and explains in its message (one line)."""

    #: The command line's exit status for it: 2 for what the user fixes before running again
    #: (as for a bad option), 1 for a run that failed on its way.
    exit_code: int = 1


class SetupError(TextgymError, ValueError):
    """Input the user can fix, found before or while setting a run up: a model, data file,
    checkpoint, config or program that cannot be used. Exit status 2."""

    exit_code = 2


class UsageError(TextgymError):
    """A bad command line: an unknown option, a value of the wrong type, a missing argument.
    Printed as one ``textgym: error:`` line, whole (a list of choices may be long). Exit
    status 2."""

    exit_code = 2


class MissingExtraError(SetupError, ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` that
    adds it. Exit status 2."""


class NonFiniteError(TextgymError, ValueError):
    """A number a run cannot go on with: an episode return that is NaN or infinite, an
    advantage beyond float32, a loss that stays non-finite. The run's data, not a bug.
    Exit status 1."""


class EndpointError(TextgymError):
    """An OpenAI-compatible endpoint that still failed after the policy's retries (down,
    too slow, or answering something that is not a chat completion). Exit status 1."""


class OutputWriteError(TextgymError, OSError):
    """A result file that cannot be written (a full disk, no permission); what the file
    already holds is whole records. Exit status 1."""

    def __str__(self) -> str:
        # Made with one message (textgym.results.write_failure), it is the message, whatever
        # errno and strerror were set to afterwards.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()
