"""A corpus of crafted model folders and LoRA adapters given as ``--model DIR``: each is refused
in one ``textgym: error:`` line naming the problem, with a non-zero exit, no traceback, nothing
from the folder executed and no network attempt, by ``eval``, ``train`` and ``sft`` alike; a
good saved model and a good adapter still load.

The corpus is built in ``tmp_path`` from the built-in tiny model (saved with ``save_pretrained``,
then damaged): truncated or garbled safetensors, a pickled ``pytorch_model.bin`` whose payload
would write a marker file, a tensor of the wrong shape, a missing or extra tensor, int32, NaN
and inf weights, custom code (``auto_map`` with a ``.py`` that would write a marker), and broken
adapters. The CLI runs in-process through :func:`textgym.cli.main`.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gymnasium")
peft = pytest.importorskip("peft")

from safetensors.torch import load_file, save_file  # noqa: E402

from textgym.cli import main  # noqa: E402
from textgym.model_files import ALLOW_PICKLE_ENV, ModelLoadError  # noqa: E402
from textgym.models import load_model
from textgym.tiny_model import build_tiny_model  # noqa: E402

pytestmark = pytest.mark.llm

WEIGHTS = "model.safetensors"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
MARKER = "EXECUTED"  # a crafted payload writes this file beside the folder if it ever runs


# ----------------------------------------------------------------------------- the corpus


def _payload(folder: Path) -> str:
    """Python source that writes the marker file beside ``folder`` (one level up)."""
    return f"open({str(folder.parent / MARKER)!r}, 'w').write('ran')\n"


class _Exploit:
    """Unpickling it runs :func:`_payload` (``exec`` of a string): what a pickle can do."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self) -> tuple[Callable[..., object], tuple[str]]:
        return exec, (self.source,)


def _edit_weights(folder: Path, edit: Callable[[dict], None], name: str = WEIGHTS) -> None:
    tensors = load_file(str(folder / name))
    edit(tensors)
    save_file(tensors, str(folder / name), metadata={"format": "pt"})


def _edit_json(file: Path, edit: Callable[[dict], None]) -> None:
    data = json.loads(file.read_text())
    edit(data)
    file.write_text(json.dumps(data))


def _truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def _set(name: str, value: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[dict], None]:
    def edit(tensors: dict) -> None:
        tensors[name] = value(tensors[name])

    return edit


def _poison(value: float) -> Callable[[torch.Tensor], torch.Tensor]:
    def change(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        tensor.view(-1)[3] = value
        return tensor

    return change


def _pickled_bin(folder: Path, name: str, replaces: str) -> None:
    """Replace the safetensors weights by a pickle whose unpickling writes the marker."""
    (folder / replaces).unlink()
    (folder / name).write_bytes(pickle.dumps({Q_PROJ: _Exploit(_payload(folder))}))


def _custom_code(folder: Path, kind: str) -> None:
    """An ``auto_map`` to a module in the folder that writes the marker when imported."""
    if kind == "model":
        code = {
            "AutoConfig": "configuration_evil.EvilConfig",
            "AutoModelForCausalLM": "modeling_evil.EvilModel",
        }
        _edit_json(
            folder / "config.json", lambda config: config.update(auto_map=code, model_type="evil")
        )
        modules = ("configuration_evil", "modeling_evil")
    else:
        code = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
        _edit_json(
            folder / "tokenizer_config.json",
            lambda config: config.update(auto_map=code, tokenizer_class="EvilTokenizer"),
        )
        modules = ("tokenization_evil",)
    for module in modules:
        (folder / f"{module}.py").write_text(_payload(folder))


#: Damages of a saved tiny model: name -> what to do to the folder, what the error must name.
MODEL_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated": (lambda d: _truncate(d / WEIGHTS), WEIGHTS),
    "garbage-header": (lambda d: (d / WEIGHTS).write_bytes(b"\xff" * 64), WEIGHTS),
    "empty-weights": (lambda d: (d / WEIGHTS).write_bytes(b""), WEIGHTS),
    "pickle-bin": (lambda d: _pickled_bin(d, "pytorch_model.bin", WEIGHTS), "pytorch_model.bin"),
    "wrong-shape": (
        lambda d: _edit_weights(d, _set(Q_PROJ, lambda t: t[:32].clone())),
        Q_PROJ,
    ),
    "wrong-vocab": (
        lambda d: _edit_weights(
            d, _set("model.embed_tokens.weight", lambda t: torch.cat([t, t[:5]]))
        ),
        "model.embed_tokens.weight",
    ),
    "missing-tensor": (lambda d: _edit_weights(d, lambda t: t.pop(Q_PROJ)), Q_PROJ),
    "extra-tensor": (
        lambda d: _edit_weights(d, lambda t: t.update({"model.extra.weight": torch.ones(3)})),
        "model.extra.weight",
    ),
    "int32": (lambda d: _edit_weights(d, _set(Q_PROJ, lambda t: t.to(torch.int32))), Q_PROJ),
    "nan": (lambda d: _edit_weights(d, _set(Q_PROJ, _poison(float("nan")))), Q_PROJ),
    "inf": (lambda d: _edit_weights(d, _set(Q_PROJ, _poison(float("-inf")))), Q_PROJ),
    "auto-map": (lambda d: _custom_code(d, "model"), "auto_map"),
    "tokenizer-auto-map": (lambda d: _custom_code(d, "tokenizer"), "auto_map"),
    "config-not-json": (lambda d: (d / "config.json").write_text("{nope"), "config.json"),
    "no-config": (lambda d: (d / "config.json").unlink(), "config.json"),
    "unknown-model-type": (
        lambda d: _edit_json(d / "config.json", lambda c: c.update(model_type="nope")),
        "config.json",
    ),
    "no-weights": (lambda d: (d / WEIGHTS).unlink(), "safetensors"),
    "shard-index-only": (
        lambda d: (
            (d / f"{WEIGHTS}.index.json").write_text(
                json.dumps(
                    {"metadata": {}, "weight_map": {Q_PROJ: "model-00001-of-00002.safetensors"}}
                )
            ),
            (d / WEIGHTS).unlink(),
        ),
        "model-00001-of-00002.safetensors",
    ),
}


def _adapter_config(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    return lambda d: _edit_json(d / "adapter_config.json", edit)


#: Damages of a saved LoRA adapter over ``tiny``.
ADAPTER_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "adapter-config-not-json": (
        lambda d: (d / "adapter_config.json").write_text("{nope"),
        "adapter_config.json",
    ),
    "adapter-config-bad-rank": (_adapter_config(lambda c: c.update(r="two")), "adapter_config"),
    "adapter-config-bad-type": (
        _adapter_config(lambda c: c.update(peft_type="NOPE")),
        "adapter_config.json",
    ),
    "adapter-no-base": (
        _adapter_config(lambda c: c.pop("base_model_name_or_path")),
        "base_model_name_or_path",
    ),
    "adapter-hub-base": (
        _adapter_config(lambda c: c.update(base_model_name_or_path="someone/some-model")),
        "someone/some-model",
    ),
    "adapter-missing-local-base": (
        _adapter_config(lambda c: c.update(base_model_name_or_path="../no-such-base")),
        "no-such-base",
    ),
    "adapter-target-not-in-model": (
        _adapter_config(lambda c: c.update(target_modules=["no_such_proj"])),
        "no_such_proj",
    ),
    "adapter-wrong-shape": (
        lambda d: _edit_weights(
            d, lambda t: t.update({k: torch.cat([v, v]) for k, v in t.items()}), ADAPTER_WEIGHTS
        ),
        "lora",
    ),
    "adapter-wrong-names": (
        lambda d: _edit_weights(
            d,
            lambda t: t.update({k.replace("layers.0", "layers.7"): t.pop(k) for k in list(t)}),
            ADAPTER_WEIGHTS,
        ),
        "layers.7",
    ),
    "adapter-nan": (
        lambda d: _edit_weights(
            d, lambda t: t.update({k: v * float("nan") for k, v in t.items()}), ADAPTER_WEIGHTS
        ),
        ADAPTER_WEIGHTS,
    ),
    "adapter-int32": (
        lambda d: _edit_weights(
            d, lambda t: t.update({k: v.to(torch.int32) for k, v in t.items()}), ADAPTER_WEIGHTS
        ),
        ADAPTER_WEIGHTS,
    ),
    "adapter-truncated": (lambda d: _truncate(d / ADAPTER_WEIGHTS), ADAPTER_WEIGHTS),
    "adapter-no-weights": (lambda d: (d / ADAPTER_WEIGHTS).unlink(), ADAPTER_WEIGHTS),
    "adapter-pickle-bin": (
        lambda d: _pickled_bin(d, "adapter_model.bin", ADAPTER_WEIGHTS),
        "adapter_model.bin",
    ),
}

CASES = {**MODEL_CASES, **ADAPTER_CASES}


def save_tiny(folder: Path) -> Path:
    """The built-in tiny model and its tokenizer, saved as a model folder."""
    model, tokenizer = build_tiny_model(seed=1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_adapter(folder: Path) -> Path:
    """A LoRA adapter (rank 2 on q_proj and v_proj, non-zero B) over ``tiny``."""
    from peft import LoraConfig, get_peft_model

    model, _ = build_tiny_model()
    lora = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(0))
    lora.save_pretrained(folder)
    _edit_json(folder / "adapter_config.json", lambda c: c.update(base_model_name_or_path="tiny"))
    return folder


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    root = tmp_path_factory.mktemp("originals")
    return {"model": save_tiny(root / "model"), "adapter": save_adapter(root / "adapter")}


def craft(case: str, originals: dict[str, Path], where: Path) -> Path:
    """Copy the good model or adapter to ``where/case/model`` and damage it as ``case`` says."""
    damage, _ = CASES[case]
    folder = where / case / "model"
    shutil.copytree(originals["adapter" if case in ADAPTER_CASES else "model"], folder)
    damage(folder)
    return folder


# ----------------------------------------------------------------------------- the CLI runs

TTT = "textgym/TicTacToe-v0"
COMMANDS = {
    "eval": lambda model, tmp: (
        ["eval", TTT, "--policy", "hf", "--model", model]
        + ["--episodes", "1", "--max-new-tokens", "4", "--no-progress"]
    ),
    "train": lambda model, tmp: (
        ["train", TTT, "--model", model, "--device", "cpu"]
        + ["--output-dir", f"{tmp}/run", "--no-progress", "--no-tensorboard"]
    ),
    "sft": lambda model, tmp: (
        ["sft", "--data", f"{tmp}/sft.jsonl", "--model", model]
        + ["--device", "cpu", "--output-dir", f"{tmp}/run", "--no-progress", "--no-tensorboard"]
    ),
}


@pytest.fixture
def guarded(tmp_path, monkeypatch):
    """A user at a terminal who answers ``y`` to any prompt, online as far as textgym can tell,
    with every connection attempt recorded (and refused); returns the attempts."""
    import huggingface_hub.constants

    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args[:2])
        raise OSError("the network is off in this test")

    monkeypatch.setattr("builtins.input", lambda *args, **kwargs: "y")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    chat = [{"role": "user", "content": "4?"}, {"role": "assistant", "content": "<move>4</move>"}]
    (tmp_path / "sft.jsonl").write_text(json.dumps({"messages": chat}) + "\n")
    monkeypatch.chdir(tmp_path)
    return attempts


def _run_cli(argv: list[str], capsys) -> tuple[int | str | None, list[str]]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_folder_is_refused_in_one_line(
    case, command, originals, tmp_path, guarded, capsys
):
    folder = craft(case, originals, tmp_path)
    code, lines = _run_cli(COMMANDS[command](str(folder), tmp_path), capsys)
    assert code not in (0, None), lines
    assert len(lines) == 1 and lines[0].startswith("textgym: error: "), lines
    assert CASES[case][1] in lines[0], lines[0]
    assert not (folder.parent / MARKER).exists(), "code from the folder ran"
    assert guarded == [], "textgym tried the network"


@pytest.mark.parametrize("case", list(CASES))
def test_each_refusal_is_a_one_line_model_load_error(case, originals, tmp_path, guarded):
    folder = craft(case, originals, tmp_path)
    with pytest.raises(ModelLoadError) as error:
        load_model(str(folder))
    assert "\n" not in str(error.value) and CASES[case][1] in str(error.value)
    assert not (folder.parent / MARKER).exists() and guarded == []


def test_a_file_given_as_model_is_refused_in_one_line(originals, tmp_path, guarded, capsys):
    code, lines = _run_cli(COMMANDS["eval"](str(originals["model"] / WEIGHTS), tmp_path), capsys)
    assert code == 2 and len(lines) == 1 and "got the file" in lines[0], lines


# ----------------------------------------------------------------------------- what still loads


def _same_weights(model, reference) -> bool:
    mine = model.state_dict()
    return all(torch.equal(mine[name], tensor) for name, tensor in reference.state_dict().items())


def test_a_good_folder_loads_quietly_as_saved(originals, guarded, capsys):
    model, tokenizer = load_model(str(originals["model"]))
    assert _same_weights(model, build_tiny_model(seed=1)[0])
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template
    assert capsys.readouterr().err == "" and guarded == []


@pytest.mark.slow  # about 10 s: a whole eval episode
def test_a_good_folder_plays_through_the_cli(originals, tmp_path, guarded, capsys):
    assert main(COMMANDS["eval"](str(originals["model"]), tmp_path)) == 0
    assert "Traceback" not in capsys.readouterr().err and guarded == []


def test_a_good_adapter_loads_merged_into_its_base(originals, guarded, capsys):
    model, _ = load_model(str(originals["adapter"]))
    base, _ = build_tiny_model()
    merged = model.state_dict()
    changed = {name for name, t in base.state_dict().items() if not torch.equal(merged[name], t)}
    assert changed == {
        f"model.layers.{layer}.self_attn.{proj}.weight"
        for layer in (0, 1)
        for proj in ("q_proj", "v_proj")
    }
    assert capsys.readouterr().err == "" and guarded == []


def test_an_adapter_over_a_local_folder_loads(originals, tmp_path, guarded):
    shutil.copytree(originals["model"], tmp_path / "base")
    adapter = shutil.copytree(originals["adapter"], tmp_path / "adapter")
    _edit_json(
        adapter / "adapter_config.json", lambda c: c.update(base_model_name_or_path="../base")
    )
    model, _ = load_model(str(adapter))
    base, _ = build_tiny_model(seed=1)
    assert not torch.equal(model.state_dict()[Q_PROJ], base.state_dict()[Q_PROJ])
    assert guarded == []


def test_a_bfloat16_folder_loads(tmp_path, guarded):
    model, tokenizer = build_tiny_model(seed=1)
    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    tokenizer.save_pretrained(tmp_path / "bf16")
    loaded, _ = load_model(str(tmp_path / "bf16"))
    assert next(loaded.parameters()).dtype == torch.bfloat16 and _same_weights(loaded, model)


def test_pickled_weights_load_only_with_the_opt_in(originals, tmp_path, monkeypatch, guarded):
    folder = shutil.copytree(originals["model"], tmp_path / "pickled")
    torch.save(load_file(str(folder / WEIGHTS)), folder / "pytorch_model.bin")
    (folder / WEIGHTS).unlink()
    with pytest.raises(
        ModelLoadError, match=f"pytorch_model.bin holds pickled.*{ALLOW_PICKLE_ENV}=1"
    ):
        load_model(str(folder))
    monkeypatch.setenv(ALLOW_PICKLE_ENV, "1")
    model, _ = load_model(str(folder))
    assert _same_weights(model, build_tiny_model(seed=1)[0])


@pytest.mark.parametrize("case", ["pickle-bin", "adapter-pickle-bin"])
def test_the_pickle_opt_in_still_never_runs_code(case, originals, tmp_path, monkeypatch, guarded):
    monkeypatch.setenv(ALLOW_PICKLE_ENV, "1")  # read with torch.load(weights_only=True)
    folder = craft(case, originals, tmp_path)
    with pytest.raises(ModelLoadError, match="UnpicklingError"):
        load_model(str(folder))
    assert not (folder.parent / MARKER).exists()
