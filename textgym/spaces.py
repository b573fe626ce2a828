"""Text spaces for LLM observations and actions.

Gymnasium's :class:`gymnasium.spaces.Text` only contains strings drawn from its ``charset``
(alphanumeric by default), which rejects ordinary LLM output: punctuation, newlines, tags,
non-Latin scripts. :class:`UnicodeText` keeps the ``Text`` interface (so wrappers and checkers
that look for a ``Text`` space still work) but contains *any* Python ``str`` whose length lies in
``[min_length, max_length]``. Sampling draws printable ASCII text, which is what random-agent
checks need.

The action length rule
----------------------
Every textgym env enforces its action space's ``max_length`` in ``step``, the same way: an
action longer than that is an invalid action, ``info["invalid_action"] = True`` with
``info["invalid_reason"] = "too_long"``, the observation says so (:func:`too_long_message`),
and the env's state is unchanged (multi-turn tasks go on; single-turn tasks end with reward 0,
as for every other invalid answer). The text is not parsed at all, so such a step costs one
``len`` beyond the usual work, however long the action; model output is untrusted, and this
bounds what every parser downstream can be given.

Vector envs
-----------
``gymnasium.make_vec(..., vectorization_mode="async")`` passes observations through shared
memory with functions that Gymnasium dispatches on the space type. For ``Text`` they encode each
character as its index in the space's ``charset``, which garbles or refuses any character
outside it; this module registers :class:`UnicodeText` with its own three functions, which store
each observation as its length followed by its Unicode code points (``int32``, one slot per
character up to ``max_length``), so any string of the space round-trips exactly. Reading
gives a live view (:class:`SharedTexts`, as Gymnasium's arrays are views of the shared memory)
that the vector env copies into a ``tuple`` of ``str`` before handing it out.
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

__all__ = ["TOO_LONG", "SharedTexts", "UnicodeText", "too_long_message"]

#: ``info["invalid_reason"]`` of an action over the action space's ``max_length``.
TOO_LONG = "too_long"

_PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " \n"


class UnicodeText(spaces.Text):
    """A ``Text`` space that contains any Unicode string up to ``max_length`` characters.

    Args:
        max_length: Maximum length in characters (Unicode code points), inclusive.
        min_length: Minimum length in characters, inclusive. Defaults to 0 so that an empty
            completion is a member of an action space (the env then answers it as an invalid
            action instead of the space rejecting it).
        seed: Seed for :meth:`sample`.

    Raises:
        ValueError: if ``min_length`` is negative or greater than ``max_length``.

    Example:
        >>> space = UnicodeText(max_length=16)
        >>> space.contains("<move>4</move>"), space.contains("ходи 4 ✓"), space.contains(4)
        (True, True, False)
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | None = None):
        if min_length < 0 or min_length > max_length:
            raise ValueError(
                f"Expected 0 <= min_length <= max_length, got min_length={min_length}, "
                f"max_length={max_length}"
            )
        super().__init__(
            max_length=max_length, min_length=min_length, charset=_PRINTABLE, seed=seed
        )

    def contains(self, x: Any) -> bool:
        """Return True for any ``str`` whose length is within ``[min_length, max_length]``."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Sample printable ASCII text of uniformly random length (ignores masks)."""
        length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        chars = self.np_random.choice(np.array(list(_PRINTABLE)), size=length)
        return "".join(chars.tolist())

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    __hash__ = None  # mutable RNG state; equality is by bounds only


def too_long_message(action: str, space: spaces.Text) -> str | None:
    """The sentence an over-long action gets back, or ``None`` if ``action`` is short enough.

    Args:
        action: The completion given to ``step``.
        space: The env's action space; its ``max_length`` is the limit, in characters.

    Example:
        >>> too_long_message("x" * 20, UnicodeText(max_length=16))
        'Your reply has 20 characters, more than the 16 this task reads, so it was not read.'
        >>> too_long_message("<move>4</move>", UnicodeText(max_length=16)) is None
        True
    """
    if len(action) <= space.max_length:
        return None
    return (
        f"Your reply has {len(action):,} characters, more than the {space.max_length:,} this task "
        "reads, so it was not read."
    )


# -- shared memory for async vector envs (see the module docstring) -----------------------------


@create_shared_memory.register(UnicodeText)
def _create_unicode_shared_memory(space: UnicodeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    """``n`` rows of ``1 + max_length`` int32: the length, then the code points."""
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


class SharedTexts(Sequence[str]):
    """The texts of a vector env's shared memory, decoded when read (a live view).

    ``copy.deepcopy`` and ``copy.copy`` give a ``tuple`` of ``str``: what an async vector env
    returns from ``reset`` and ``step`` (with its default ``copy=True``).

    Args:
        rows: ``[n, 1 + max_length]`` int32 view of the shared memory: each row is a text's
            length in code points, then its code points.
    """

    def __init__(self, rows: np.ndarray):
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._rows[index]
        codes = row[1 : 1 + int(row[0])].astype("<u4")
        return codes.tobytes().decode("utf-32-le", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, (tuple, SharedTexts)) and tuple(self) == tuple(other)

    __hash__ = None  # the contents change under it

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(UnicodeText)
def _read_unicode_from_shared_memory(
    space: UnicodeText, shared_memory: Any, n: int = 1
) -> SharedTexts:
    rows = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
    return SharedTexts(rows.reshape(n, space.max_length + 1))


@write_to_shared_memory.register(UnicodeText)
def _write_unicode_to_shared_memory(
    space: UnicodeText, index: int, value: str, shared_memory: Any
) -> None:
    if not space.contains(value):
        raise ValueError(
            f"Expected an observation in {space} (a str of at most {space.max_length} "
            f"characters), got {type(value).__name__} of length {len(value) if isinstance(value, str) else '-'}"
        )
    size = space.max_length + 1
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size : (index + 1) * size]
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    row[0] = len(codes)
    row[1 : 1 + len(codes)] = codes
