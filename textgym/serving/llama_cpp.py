"""llama.cpp's ``llama-server`` as the rollout engine of a trainer, and LoRA weights pushed to it.

Why llama.cpp's own server and not ``python -m llama_cpp.server`` (the ``server`` extra, which
the OpenAI policy's tests use): a policy-gradient trainer needs the token ids the server sampled
and their log-probabilities (token-in/token-out, so a decoded-then-re-tokenized completion never
differs from what was sampled). ``llama-server``'s native ``POST /completion`` takes the prompt
as token ids and returns ``tokens`` (the sampled ids, with ``"return_tokens": true``) and, per
token, the probability under the sampling chain (``"n_probs": 1, "post_sampling_probs":
true``); llama-cpp-python's server takes text prompts only and returns tokens as text pieces.
The production engines have the same two things under other names: vLLM returns sampled ids in
``logprobs`` with ``"return_tokens_as_token_ids": true``, SGLang with ``"return_logprob": true``
on its native ``/generate``.

Weights reach the server as a LoRA adapter: :func:`write_lora_gguf` writes a ``peft`` model's
adapter in llama.cpp's GGUF adapter format (a few MB for Gemma 3 270M at rank 16), and
:meth:`LlamaServer.restart` starts the server again with it (``--lora``; the server cannot
swap an adapter file while it runs, only its scale). Full fine-tuning would need the whole
model converted to GGUF each step, which this module does not do.

``llama-server`` is not on PyPI; ``tools/build_llama_server.sh`` builds it from the llama.cpp
sources that the ``llama-cpp-python`` sdist vendors (the version the ``server`` extra pins).
:func:`find_llama_server` looks for it in ``$TEXTGYM_LLAMA_SERVER``, then on ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from textgym.errors import MissingExtraError, SetupError

__all__ = [
    "ProgramNotFoundError",
    "LLAMA_SERVER_ENV",
    "LlamaServer",
    "find_llama_server",
    "free_port",
    "lora_tensors",
    "stop_process",
    "write_lora_gguf",
]

#: Environment variable naming the ``llama-server`` binary.
LLAMA_SERVER_ENV = "TEXTGYM_LLAMA_SERVER"


class ProgramNotFoundError(SetupError, FileNotFoundError):
    """An external program textgym runs (``llama-server``) is not there; the message says how
    to build or point to it."""


def find_llama_server(path: str | os.PathLike[str] | None = None) -> Path:
    """The ``llama-server`` binary: ``path``, else ``$TEXTGYM_LLAMA_SERVER``, else ``PATH``
    (the first of them that is given is the answer or the error).

    Raises:
        ProgramNotFoundError: none of them names an executable file; the message says how to
            build one.
    """
    given = path or os.environ.get(LLAMA_SERVER_ENV)  # a named binary is never passed over
    candidate = given or shutil.which("llama-server")
    if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
        return Path(candidate)
    where = f"{given!r} is not an executable file" if given else "none is on PATH"
    raise ProgramNotFoundError(
        f"Expected llama.cpp's llama-server binary, but {where}; build it with "
        f"`bash tools/build_llama_server.sh DIR` and set {LLAMA_SERVER_ENV}=DIR/llama-server"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Stop a child process: SIGTERM, then SIGKILL if it has not exited after ``timeout_s``
    seconds; returns once it is gone (reaped)."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class LlamaServer:
    """One ``llama-server`` process on 127.0.0.1, optionally with a LoRA adapter; a context
    manager (started on enter, stopped on exit).

    Args:
        model: The base model's GGUF file.
        lora: A GGUF LoRA adapter (:func:`write_lora_gguf`) applied at scale 1, or ``None``.
        binary: The ``llama-server`` binary (default: :func:`find_llama_server`).
        port: TCP port (default: a free one, chosen at each start).
        parallel: Server slots, i.e. sequences decoded together (continuous batching).
        ctx_size: Tokens of context per slot (the server gets ``parallel x ctx_size``).
        threads: CPU threads (default: the server's own choice).
        log_path: File that receives the server's output, appended at each start (discarded
            when ``None``); a failed start quotes its tail.
        start_timeout_s: Seconds to wait for ``GET /health`` to answer 200.

    Raises:
        FileNotFoundError: no binary, or ``model`` / ``lora`` is not a file.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        lora: str | os.PathLike[str] | None = None,
        binary: str | os.PathLike[str] | None = None,
        port: int | None = None,
        parallel: int = 8,
        ctx_size: int = 2048,
        threads: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.binary = find_llama_server(binary)
        self.model = _existing_file(model, "model")
        self.lora = None if lora is None else _existing_file(lora, "lora")
        self.fixed_port = port
        self.port = port or 0
        self.parallel = int(parallel)
        self.ctx_size = int(ctx_size)
        self.threads = threads
        self.log_path = None if log_path is None else Path(log_path)
        self.start_timeout_s = float(start_timeout_s)
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The command line of the next start."""
        command = [str(self.binary), "--model", str(self.model), "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--parallel", str(self.parallel)]
        command += ["--ctx-size", str(self.parallel * self.ctx_size), "--no-webui"]
        if self.threads is not None:
            command += ["--threads", str(self.threads)]
        if self.lora is not None:
            command += ["--lora", str(self.lora)]
        return command

    def start(self) -> None:
        """Start the process and wait until it serves.

        Raises:
            RuntimeError: the process exited, or did not answer in ``start_timeout_s``; the
                message ends with the tail of its log when there is one.
        """
        if self._process is not None:
            raise RuntimeError(f"llama-server is already running at {self.url}")
        self.port = self.fixed_port or free_port()
        output: Any = subprocess.DEVNULL
        if self.log_path is not None:
            output = open(self.log_path, "ab")  # noqa: SIM115 (the child holds it; closed below)
        try:
            self._process = subprocess.Popen(
                self.command(), stdout=output, stderr=subprocess.STDOUT
            )
        finally:
            if output is not subprocess.DEVNULL:
                output.close()
        self.starts += 1
        deadline = time.monotonic() + self.start_timeout_s
        while not self._healthy():
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise RuntimeError(f"llama-server exited with code {code}{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"llama-server did not answer {self.url}/health in "
                    f"{self.start_timeout_s:g} s{self._log_tail()}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the process (:func:`stop_process`); nothing if it is not running."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process)

    def restart(self, *, lora: str | os.PathLike[str] | None) -> float:
        """Serve with ``lora`` (a new adapter file, or ``None`` for the base model).

        Returns:
            Seconds the restart took (stop, start, first healthy answer).
        """
        began = time.perf_counter()
        self.lora = None if lora is None else _existing_file(lora, "lora")
        self.stop()
        self.start()
        return time.perf_counter() - began

    def is_running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                return reply.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return ":\n" + self.log_path.read_text(errors="replace")[-2000:]

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running at {self.url}" if self.is_running() else "stopped"
        return f"LlamaServer(model={self.model.name!r}, lora={self.lora}, {state})"


def _existing_file(path: str | os.PathLike[str], what: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Expected the {what} GGUF file {str(path)!r} to exist")
    return path


# --------------------------------------------------------------------------- LoRA -> GGUF


def lora_tensors(model: Any) -> tuple[dict[str, Any], float]:
    """A ``peft`` LoRA model's adapter as ``{hf_module_name: (A, B)}`` and its ``lora_alpha``.

    ``hf_module_name`` is the wrapped module's name in the base model
    (``model.layers.0.self_attn.q_proj``); ``A`` is ``[r, in]`` and ``B`` is ``[out, r]``,
    float32 CPU tensors, as ``peft`` stores them.

    Raises:
        ValueError: ``model`` has no LoRA adapter or more than one; an rsLoRA or DoRA adapter
            (their scaling differs from ``alpha / r``); LoRA on an embedding (not written by
            :func:`write_lora_gguf`); an adapter that wraps no module.
    """
    configs = getattr(model, "peft_config", None)
    if not configs or len(configs) != 1:
        raise ValueError(
            "Expected a peft model with exactly one LoRA adapter (train with lora_rank > 0), "
            f"got {type(model).__name__} with {len(configs or {})} adapters"
        )
    ((name, config),) = configs.items()
    if getattr(config, "use_rslora", False) or getattr(config, "use_dora", False):
        raise ValueError("Expected plain LoRA; rsLoRA and DoRA adapters are not written")
    pairs: dict[str, Any] = {}
    for module_name, module in model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        if lora_a is None or name not in lora_a:
            continue
        if getattr(module, "lora_embedding_A", None):
            raise ValueError(f"LoRA on an embedding ({module_name}) is not supported")
        a = lora_a[name].weight.detach().float().cpu()  # [r, in]
        b = module.lora_B[name].weight.detach().float().cpu()  # [out, r]
        pairs[module_name.removeprefix("base_model.model.")] = (a, b)
    if not pairs:
        raise ValueError("The peft model's adapter wraps no module")
    return pairs, float(config.lora_alpha)


def write_lora_gguf(model: Any, path: str | os.PathLike[str], *, architecture: str) -> Path:
    """Write a ``peft`` LoRA model's adapter as a llama.cpp GGUF LoRA adapter.

    The format is the one llama.cpp's ``convert_lora_to_gguf.py`` writes and
    ``src/llama-adapter.cpp`` reads: ``general.type = "adapter"``, ``adapter.type = "lora"``,
    ``adapter.lora.alpha``, and per wrapped linear layer ``blk.N.<name>.weight.lora_a`` (``[r,
    in]``) and ``.lora_b`` (``[out, r]``) in float32, named with the ``gguf`` package's own map
    from Hugging Face names to GGUF names for ``architecture``. llama.cpp applies
    ``B @ A x alpha / r``, as ``peft`` does.

    Args:
        model: A ``peft`` model with one LoRA adapter on linear layers.
        path: The file to write (replaced atomically).
        architecture: The base model's GGUF architecture (``"gemma3"`` for Gemma 3), which
            llama.cpp checks against the base model's.

    Returns:
        ``path``.

    Raises:
        MissingExtraError: the ``gguf`` package is missing.
        ValueError: see :func:`lora_tensors`; an unknown architecture; a module the ``gguf``
            map has no GGUF name for.
    """
    try:
        import gguf
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise MissingExtraError(
            f'Writing a GGUF adapter needs gguf ({error}); pip install "textgym[llm]"'
        ) from error
    arches = {value: key for key, value in gguf.MODEL_ARCH_NAMES.items()}
    if architecture not in arches:
        raise ValueError(f"Unknown GGUF architecture {architecture!r}")
    pairs, alpha = lora_tensors(model)
    blocks = 1 + max(_block_index(name) for name in pairs)
    names = gguf.get_tensor_name_map(arches[architecture], blocks)
    path = Path(path)
    scratch = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(scratch), architecture)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    for module_name, (a, b) in pairs.items():
        gguf_name = names.get_name(module_name + ".weight", try_suffixes=(".weight",))
        if gguf_name is None:
            raise ValueError(f"The gguf map of {architecture!r} has no name for {module_name!r}")
        writer.add_tensor(gguf_name + ".lora_a", a.numpy())
        writer.add_tensor(gguf_name + ".lora_b", b.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(scratch, path)
    return path


def _block_index(module_name: str) -> int:
    parts = module_name.split(".")
    return next((int(p) for p in parts if p.isdigit()), 0)
