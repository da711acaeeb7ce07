"""The GPU check on a CPU machine: its arguments are checked, it skips with the reason when there is no CUDA device,
and a part that fails is recorded while the next one still runs (the parts themselves need a GPU)."""

from __future__ import annotations

import json

import pytest

import bench.bench_gpu as gpu_check

REQUIRED = ["--data-dir", "/data", "--base", "0123456789abcdef0123"]


def test_defaults_run_every_part_in_order():
    args = gpu_check.parse(REQUIRED)
    assert args.parts == ["sft", "generation", "rl-vllm", "rl-serve"] and args.profile == "small"


@pytest.mark.parametrize(("argv", "said"), [
    (["--data-dir", "/data"], "--base"),
    (REQUIRED + ["--parts", "sft", "train"], "invalid choice: 'train'"),
    (REQUIRED + ["--sft-steps", "0"], "--sft-steps must be at least 1"),
    (REQUIRED + ["--rl-steps", "x"], "invalid int value"),
])
def test_bad_arguments_stop_at_the_parser_naming_them(argv, said, capsys):
    with pytest.raises(SystemExit) as stopped:
        gpu_check.parse(argv)
    assert stopped.value.code == 2 and said in capsys.readouterr().err


def test_without_cuda_it_says_why_and_runs_nothing(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu_check, "run", lambda *a: pytest.fail("a part ran without a CUDA device"))
    out = tmp_path / "figures.json"
    assert gpu_check.main([*REQUIRED, "--out", str(out)]) == 0
    assert "gpu check skipped: no CUDA device" in capsys.readouterr().err and not out.exists()


def test_a_failing_part_is_recorded_and_the_next_still_runs(monkeypatch, tmp_path):
    def broken(*_):
        raise RuntimeError("vllm serve exited 1")

    monkeypatch.setattr(gpu_check, "sft_part", broken)
    monkeypatch.setattr(gpu_check, "generation_part", lambda *_: {"vllm_over_hf": 3.0})
    out = tmp_path / "figures.json"
    args = gpu_check.parse([*REQUIRED, "--parts", "sft", "generation", "--out", str(out)])
    gpu_check.run(args, tmp_path)
    parts = json.loads(out.read_text())["parts"]
    assert parts["sft"]["error"] == "RuntimeError: vllm serve exited 1"
    assert parts["generation"]["vllm_over_hf"] == 3.0 and parts["generation"]["seconds"] >= 0
