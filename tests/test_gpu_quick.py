"""The GPU speed check on the CPU: ``gpu_suite.py --quick`` (every part's plumbing, a failing or
timed-out part losing only itself), ``load_model(..., random_weights=True)`` on a folder with
only a config and tokenizer, and the JSON of ``llm_decode.py`` / ``grpo_vs_trl.py`` when one of
their child processes fails."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.llm

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"


def _benchmark(name: str):
    """Import ``benchmarks/<name>.py`` (its sibling ``_provenance`` on the path)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# --- random weights -------------------------------------------------------------------------


@pytest.fixture
def config_only_folder(tmp_path):
    """A saved model folder with its weights removed, and the saved model."""
    from textgym.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model(seed=7)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    real = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    (folder / "model.safetensors").unlink()
    return folder, model.config, real


def test_random_weights_keep_the_config_and_tokenizer_and_draw_new_weights(config_only_folder):
    from textgym.model_files import ModelLoadError
    from textgym.models import load_model

    folder, config, real = config_only_folder
    with pytest.raises(ModelLoadError):  # without the option, no weights is an error
        load_model(str(folder))
    model, tokenizer = load_model(str(folder), random_weights=True)
    loaded = {k: v for k, v in model.config.to_dict().items() if k != "_name_or_path"}
    assert loaded == {k: v for k, v in config.to_dict().items() if k != "_name_or_path"}
    assert tokenizer.decode(tokenizer.encode("tic tac")) == "tic tac"
    state = model.state_dict()
    assert set(state) == set(real)
    assert all(state[name].shape == real[name].shape for name in real)
    assert not any(torch.equal(state[name], real[name]) for name in real if "norm" not in name)
    again, _ = load_model(str(folder), random_weights=True)  # a fixed seed
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))


def test_random_weights_loading_covers_loads_that_do_not_ask(config_only_folder):
    from textgym.models import load_model
    from textgym.random_weights import random_weights_loading

    folder, _, real = config_only_folder
    with random_weights_loading():
        model, _ = load_model(str(folder))  # as the GRPO trainer calls it
    assert model.state_dict().keys() == real.keys()
    with pytest.raises(ValueError):  # the block has ended: real weights again, and none here
        load_model(str(folder))


def test_random_weights_refuse_custom_code_and_adapters(config_only_folder, tmp_path):
    from textgym.model_files import ModelLoadError
    from textgym.models import load_model

    folder, _, _ = config_only_folder
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"x": "y.Z"}}))
    with pytest.raises(ModelLoadError, match="auto_map"):
        load_model(str(folder), random_weights=True)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="adapter"):
        load_model(str(adapter), random_weights=True)
    with pytest.raises(ModelLoadError, match="local folder"):
        load_model(str(tmp_path / "missing"), random_weights=True)


# --- the quick suite ------------------------------------------------------------------------


@pytest.mark.subprocess
def test_quick_suite_a_failing_or_timed_out_part_loses_only_itself(tmp_path):
    suite = _benchmark("gpu_suite")
    py = sys.executable
    # The timed-out part starts a grandchild that must die with it (its process group).
    pid_file = tmp_path / "grandchild.pid"
    sleeper = "import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', "
    sleeper += (
        f"'import time; time.sleep(60)']); open({str(pid_file)!r}, 'w').write(str(child.pid)); "
    )
    sleeper += "time.sleep(60)"
    parts = [
        suite.Part("fails", lambda r, s: [py, "-c", "import sys; print('boom'); sys.exit(3)"]),
        suite.Part("hangs", lambda r, s: [py, "-c", sleeper], cap_s=3),
        suite.Part("cuda", lambda r, s: [py, "-c", "pass"], needs_cuda=True),
        suite.Part(
            "passes",
            lambda r, s: [py, "-c", f"open({str(r / 'passes.bench.json')!r}, 'w').write('{{}}')"],
        ),
    ]
    assert suite.run_quick(parts, tmp_path, smoke=True, budget=60) == 1
    summary = json.loads((tmp_path / "quick_summary.json").read_text())
    rows = summary["parts"]
    assert summary["device"] and summary["commit"]
    assert rows["fails"]["status"] == "failed" and rows["fails"]["returncode"] == 3
    assert rows["hangs"]["status"] == "timed out" and rows["hangs"]["seconds"] < 30
    assert rows["cuda"]["status"] == ("ok" if torch.cuda.is_available() else "skipped")
    assert rows["passes"] == {**rows["passes"], "status": "ok", "result": "passes.bench.json"}
    record = json.loads((tmp_path / "fails.json").read_text())
    assert record["status"] == "failed" and "boom" in record["output_tail"] and record["commit"]
    assert json.loads((tmp_path / "hangs.json").read_text())["timed_out"] is True
    # Nothing of the timed-out part is left running.
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        if not _running(grandchild):
            break
        time.sleep(0.1)
    assert not _running(grandchild)


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_quick_suite_skips_parts_once_the_budget_is_spent(tmp_path):
    suite = _benchmark("gpu_suite")
    parts = [suite.Part("late", lambda r, s: [sys.executable, "-c", "pass"], cap_s=60)]
    assert suite.run_quick(parts, tmp_path, smoke=True, budget=5) == 0
    row = json.loads((tmp_path / "quick_summary.json").read_text())["parts"]["late"]
    assert row["status"] == "skipped" and "budget" in row["reason"]


def test_quick_parts_mirror_the_gpu_check_and_pass_random_weights(tmp_path):
    suite = _benchmark("gpu_suite")
    parts = suite.quick_parts("gemma-3-270m", random_weights=True)
    names = [part.name for part in parts]
    assert names[0] == "quick-tests" and len(set(names)) == len(names) == 9
    # Ours and TRL (cuDNN attention on and off) alternate in one part (issue 54).
    versus = " ".join(parts[names.index("quick-grpo-vs-trl")].command(tmp_path, False))
    assert "--trainers ours trl trl_no_cudnn" in versus and "--steps 5" in versus
    assert parts[names.index("quick-grpo-vs-trl")].needs_module == "trl"
    tests = parts[0].command(tmp_path, False)
    assert "error:CUDA graphs turned off:RuntimeWarning" in tests
    for part in parts[1:]:
        full, smoke = part.command(tmp_path, False), part.command(tmp_path, True)
        assert "--random-weights" in full and full[full.index("--model") + 1] == "gemma-3-270m"
        assert smoke[smoke.index("--model") + 1] == "tiny"
        assert sum(part.cap_s for part in parts) > 480  # the budget, not the caps, ends the run
    decode = " ".join(parts[names.index("quick-decode-now")].command(tmp_path, False))
    assert "--engines now now-fused --batches 1 8 32 256 --turns 4 --new-tokens 64" in decode
    # One decode step's and one update's profile, written beside the part's record.
    for name in ("quick-profile-decode", "quick-profile-grpo"):
        command = parts[names.index(name)].command(tmp_path, False)
        assert command[command.index("--profile-output") + 1] == f"{tmp_path}/{name}.profile.json"


@pytest.mark.subprocess
@pytest.mark.slow
def test_quick_smoke_runs_every_part_on_the_cpu(tmp_path):
    command = [
        sys.executable,
        str(BENCH / "gpu_suite.py"),
        "--quick",
        "--smoke",
        "--random-weights",
        "--results",
        str(tmp_path),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    rows = json.loads((tmp_path / "quick_summary.json").read_text())["parts"]
    cuda_only = {"quick-tests", "quick-grpo-decode"}
    for name, row in rows.items():
        expected = "skipped" if name in cuda_only and not torch.cuda.is_available() else "ok"
        assert row["status"] == expected, (name, row)
        record = json.loads((tmp_path / f"{name}.json").read_text())
        assert record["device"] and record["commit"]
        if row["status"] == "ok" and name != "quick-tests":
            bench = json.loads((tmp_path / row["result"]).read_text())
            assert bench["weights"] == "random" and bench["commit"] == record["commit"]
        if name.startswith("quick-profile-"):
            summary = json.loads((tmp_path / f"{name}.profile.json").read_text())
            assert summary["top_ops"] and summary["top_ops"][0]["calls"] > 0


# --- benchmark JSON with a failing child ----------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.slow
def test_llm_decode_writes_what_succeeded_when_a_child_fails(tmp_path):
    output = tmp_path / "decode.json"
    command = [sys.executable, str(BENCH / "llm_decode.py"), "--model", "tiny"]
    command += ["--engines", "now", "--batches", "1", "0", "--turns", "2", "--new-tokens", "4"]
    command += ["--random-weights", "--output", str(output)]  # batch 0: the child raises
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 1, completed.stdout[-2000:] + completed.stderr[-2000:]
    record = json.loads(output.read_text())
    assert record["weights"] == "random"
    assert list(record["runs"]["now"]) == ["1"]
    assert record["runs"]["now"]["1"][0]["generated_tokens"] == 1 * 2 * 4
    (failure,) = record["failures"]
    assert (failure["engine"], failure["batch"]) == ("now", 0) and failure["returncode"] != 0
    assert "batch_size" in failure["stderr_tail"]
    assert record["complete"] is True  # every planned run tried, one failed


def test_llm_decode_keeps_the_runs_done_when_it_is_killed_midway(tmp_path, monkeypatch):
    bench = _benchmark("llm_decode")
    runs = []

    def spawn(args, engine, batch, gguf):
        if runs:  # the second run: the part's time cap kills the whole process here
            raise KeyboardInterrupt
        runs.append(batch)
        return {
            "wall_s": 1.0,
            "prefill_tokens_per_s": 10.0,
            "decode_tokens_per_s": 20.0,
            "wall_s_per_episode": 0.5,
            "peak_rss_gb": 0.1,
            "dtype": "float32",
        }

    monkeypatch.setattr(bench, "_spawn", spawn)
    output = tmp_path / "decode.json"
    argv = ["--model", "tiny", "--engines", "now", "--batches", "1", "8", "--output", str(output)]
    with pytest.raises(KeyboardInterrupt):
        bench.main(argv)
    record = json.loads(output.read_text())
    assert record["complete"] is False and list(record["runs"]["now"]) == ["1"]
    assert record["best_of_repeats"]["now"]["1"]["decode_tokens_per_s"] == 20.0
    assert not list(tmp_path.glob(".*partial"))  # replaced whole, nothing left beside it


@pytest.mark.subprocess
@pytest.mark.slow
def test_grpo_vs_trl_writes_what_succeeded_when_a_child_fails(tmp_path, monkeypatch):
    bench = _benchmark("grpo_vs_trl")
    run = subprocess.run

    def trl_fails(argv, *args, **kwargs):
        if "--only" in argv and argv[argv.index("--only") + 1] == "trl":
            argv = [sys.executable, "-c", "import sys; print('trl broke'); sys.exit(2)"]
        return run(argv, *args, **kwargs)

    monkeypatch.setattr(bench.subprocess, "run", trl_fails)
    output = tmp_path / "grpo.json"
    argv = "--steps 1 --warmup 0 --rounds 1 --groups-per-step 2 --group-size 2"
    argv += " --micro-batch-size 2 --max-new-tokens 8 --threads 1 --trainers ours trl"
    argv += f" --no-decode --random-weights --output {output}"
    assert bench.main(argv.split()) == 1
    record = json.loads(output.read_text())
    assert list(record["results"]) == ["ours"] and record["weights"] == "random"
    assert record["results"]["ours"]["step_time_mean_s"] > 0
    assert (
        record["speedup_trl_over_ours"] is None and record["goals"]["at_least_3x_best_trl"] is None
    )
    (failure,) = record["failures"]
    assert failure["runner"] == "trl" and failure["returncode"] == 2
    assert "trl broke" in failure["output_tail"]


@pytest.mark.slow
def test_grpo_vs_trl_profiles_one_run_step_by_step(tmp_path):
    bench = _benchmark("grpo_vs_trl")
    output, profile = tmp_path / "ours.json", tmp_path / "profile.json"
    argv = "--steps 2 --warmup 1 --groups-per-step 2 --group-size 2 --micro-batch-size 2"
    argv += f" --max-new-tokens 4 --threads 1 --only ours --child-output {output}"
    assert bench.main([*argv.split(), "--profile-output", str(profile)]) == 0
    record = json.loads(output.read_text())
    assert len(record["rollout_time_s"]) == len(record["update_time_s"]) == 2  # timed steps
    # A child JSON read on its own says what ran where (issue 54).
    assert record["trainer"] == "ours"
    origin = record["provenance"]
    assert origin["device"] == "cpu" and origin["commit"] and origin["weights"] == "tiny"
    assert (
        origin["settings"]["task"] == bench.env_id("dense") == "textgym-bench/ReverseTextDense-v0"
    )
    assert origin["settings"]["timed_steps"] == 2
    summary = json.loads(profile.read_text())
    # One range per step, the warm-up included, in step order.
    assert [len(summary["ranges"][k]) for k in ("grpo.rollout", "grpo.update")] == [3, 3]
    assert all(r["cpu_ms"] > 0 for r in summary["ranges"]["grpo.update"])
    assert summary["top_ops"] and summary["top_ops"][0]["self_ms"] > 0
    assert "Self CPU" in summary["table"]


def test_grpo_vs_trl_summarises_steps_by_mean_and_median_with_spread():
    bench = _benchmark("grpo_vs_trl")
    ours = bench.step_summary([1.0, 1.0, 1.2, 5.0, 1.1], [10.0] * 5)
    trl = bench.step_summary([2.0, 2.2, 2.1, 2.0, 2.4], [10.0] * 5)
    faster_trl = bench.step_summary([1.5] * 5, [10.0] * 5)
    assert ours["step_time_median_s"] == 1.1 and ours["step_time_max_s"] == 5.0
    assert ours["step_time_mean_s"] == pytest.approx(1.86)
    ratios = bench.speedups({"ours": ours, "trl": trl, "trl_no_cudnn": faster_trl})
    # One slow step moves the mean, not the median: both are reported.
    assert ratios["trl_over_ours_median"] == pytest.approx(2.1 / 1.1)
    assert ratios["trl_over_ours_mean"] == pytest.approx(2.14 / 1.86)
    assert ratios["best_trl"] == "trl_no_cudnn"
    assert ratios["best_trl_over_ours_mean"] == pytest.approx(1.5 / 1.86)
    assert bench.speedups({"ours": ours})["best_trl"] is None


@pytest.mark.parametrize("option", ["--steps 0", "--rounds 0", "--warmup -1", "--threads 0"])
def test_grpo_vs_trl_refuses_counts_out_of_range(option, capsys):
    bench = _benchmark("grpo_vs_trl")
    with pytest.raises(SystemExit) as raised:
        bench.main(option.split())
    assert raised.value.code == 2
    assert option.split()[0] in capsys.readouterr().err


def test_grpo_vs_trl_profiles_only_one_of_our_runs():
    bench = _benchmark("grpo_vs_trl")
    with pytest.raises(SystemExit):
        bench.main(["--profile-output", "x.json"])


@pytest.mark.subprocess
@pytest.mark.slow
def test_llm_decode_profiles_one_engine_at_one_batch(tmp_path):
    profile = tmp_path / "profile.json"
    command = [sys.executable, str(BENCH / "llm_decode.py"), "--model", "tiny"]
    command += ["--engines", "now", "--batches", "1", "--turns", "2", "--new-tokens", "4"]
    command += ["--output", str(tmp_path / "decode.json"), "--profile-output", str(profile)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    summary = json.loads(profile.read_text())
    assert (summary["engine"], summary["batch"]) == ("now", 1) and summary["decode_steps"] > 0
    assert summary["top_ops"] and summary["top_ops"][0]["calls"] > 0
    command[command.index("1")] = "2"  # one batch more: refused before any child runs
    command.insert(command.index("2"), "1")
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and "profiles one run" in refused.stderr


def test_grpo_vs_trl_decode_prompts_are_the_trainers_task_prompts():
    """The CUDA decode roofline decodes the prompts both trainers train on: TRL's dataset rows
    and the roofline's prompts come from the same resets, seeded as textgym's GRPO seeds task r."""
    import gymnasium as gym

    from textgym.tiny_model import build_tiny_model
    from textgym.tokens import ChatTokenizer

    bench, trl_arm = _benchmark("grpo_vs_trl"), _benchmark("_trl_arm")
    args = bench.Config(decode_batch=3, groups_per_step=2, warmup=1, steps=1, seed=5)
    _, tokenizer = build_tiny_model(seed=0)
    prompts = bench.roofline_prompts(args, tokenizer)
    rows = trl_arm._trl_dataset(args)
    assert len(rows) == 4 and [row["task_seed"] for row in rows] == [
        5 * 10**6 + r for r in range(4)
    ]
    chat = ChatTokenizer(tokenizer)
    assert prompts == [chat.prompt(rows[r]["prompt"]) for r in range(3)]
    env = gym.make(bench.env_id("dense"), max_chars=args.max_chars)
    for r, prompt in enumerate(prompts):
        observation, _ = env.reset(seed=5 * 10**6 + r)
        assert observation in tokenizer.decode(prompt)
    assert len({tuple(p) for p in prompts}) == 3  # three different tasks
