"""The server's shared env threads (``EnvWorkers``): calls run on them and raise in their
caller; a call past its deadline is abandoned with its thread, so more hung envs than threads
never hold up the other sessions' calls."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from textgym.serving.openenv_server import EnvWorkers


def test_calls_run_on_env_threads_and_raise_in_their_caller() -> None:
    workers = EnvWorkers(2)

    async def main() -> None:
        names = await asyncio.gather(
            *(workers.call(lambda: threading.current_thread().name, 5) for _ in range(8))
        )
        assert set(names) == {"textgym-env"}

        def broken() -> None:
            raise RuntimeError("the env broke")

        with pytest.raises(RuntimeError, match="the env broke"):
            await workers.call(broken, 5)
        assert await workers.call(lambda: 7, 5) == 7  # the thread lives on

    asyncio.run(main())


def test_more_hung_calls_than_threads_never_block_the_others() -> None:
    workers, release = EnvWorkers(2), threading.Event()
    alive = lambda: sum(t.name == "textgym-env" for t in threading.enumerate())  # noqa: E731
    before = alive()

    async def main() -> None:
        hung = [workers.call(release.wait, 0.2) for _ in range(3)]  # 3 hung calls, 2 threads
        for result in await asyncio.gather(*hung, return_exceptions=True):
            assert isinstance(result, asyncio.TimeoutError)
        start = time.monotonic()
        assert await asyncio.gather(*(workers.call(lambda: 1, 5) for _ in range(4))) == [1] * 4
        assert time.monotonic() - start < 1.0  # served by fresh threads, not after the hung

    asyncio.run(main())
    release.set()  # the hung calls return: their retired threads exit
    deadline = time.monotonic() + 5
    while alive() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert alive() == before  # back to the pool's size: retired threads gone, none leaked
