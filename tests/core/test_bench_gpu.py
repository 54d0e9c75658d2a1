"""bench/bench_gpu.py runs without a GPU: it skips with one line saying why, and its
``--dry-run`` takes every measurement on the CPU at tiny sizes (the exactness asserts
included), so the script CI cannot run on a GPU is still exercised."""

from __future__ import annotations

import bench_gpu  # bench/ is on the path (tests/conftest.py)
import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the bench measures it")
def test_without_a_gpu_it_says_why(capsys):
    rows = bench_gpu.main([])
    assert rows == [{"bench": "gpu", "skipped": bench_gpu.no_gpu_reason()}]
    assert capsys.readouterr().out.startswith("bench_gpu: skipped: no CUDA device")


@pytest.mark.skipif(not bench_gpu.C6288.exists(), reason="needs ../shared/corpus (c6288)")
def test_the_dry_run_measures_on_the_cpu():
    rows = bench_gpu.main(["--dry-run"])
    assert [r["bench"] for r in rows] == ["gpu relu-circuit c6288 batch 64",
                                          "gpu transformer binary_counter decode T=6 batch 4",
                                          "gpu transformer binary_counter decode T=8 batch 4"]
    assert rows[0]["gpu_torch_inputs_per_s"] > 0 and rows[1]["speedup_gpu_over_cpu_2t"] > 0
