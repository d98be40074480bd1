"""The harness's own cost: measure_throughput's img/s against a bare loop doing the same work.

Timing-based, so not part of the default test run (testpaths = tests/). Run it with

    .venv/bin/python -m pytest benchmarks/ --benchmark-only

The same small ViT and batch, on the CPU with one thread (steadier on a shared machine), in one
process. Each round times the harness once and the bare loop once for about SECONDS each, back to
back, the order alternating between rounds; a round's ratio compares two runs a fraction of a
second apart, so the machine's drift (other processes come and go) cancels, and the median over the
rounds ignores the rounds that a burst of other work spoilt. The harness may cost at most 3 % of
the bare loop's throughput. Also printed: the ratio of the best rounds and of the medians.
"""

import statistics
import time

import pytest
import torch
import torch.nn.functional as F

from benchbench.meters.throughput import Inputs, Timing, measure_throughput
from benchbench.precision import resolve
from benchbench_plugins.models import vision_transformer as vit

IMAGE_SIZE, NUM_CLASSES, WARMUP = 28, 10, 1  # the model is warm after the first round
ROUNDS, SECONDS = 24, 0.25
BATCH = {"infer": 64, "train": 32}
MIN_RATIO = 0.97


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def bare_img_per_s(model, mode: str, batch: int) -> float:
    """What one would write by hand: make a batch, warm up, time steps for SECONDS with perf_counter."""
    x = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE)
    y = torch.randint(NUM_CLASSES, (batch,))
    if mode == "infer":
        model.eval()
        with torch.inference_mode():
            for _ in range(WARMUP):
                model(x)
            start, steps = time.perf_counter(), 0
            while time.perf_counter() - start < SECONDS:
                model(x)
                steps += 1
            seconds = time.perf_counter() - start
    else:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)  # as the harness's train step (benchbench.step)

        def step():
            loss = F.cross_entropy(model(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        for _ in range(WARMUP):
            step()
        start, steps = time.perf_counter(), 0
        while time.perf_counter() - start < SECONDS:
            step()
            steps += 1
        seconds = time.perf_counter() - start
    return batch * steps / seconds


def harness_img_per_s(model, mode: str, batch: int) -> float:
    r = measure_throughput(model, Inputs(IMAGE_SIZE, 3, NUM_CLASSES, "cpu"), mode=mode,
                           precision=resolve("fp32", torch.device("cpu")), batch_size=batch,
                           timing=Timing(WARMUP, 1, SECONDS))
    assert r.batch_size == batch
    return r.img_per_s


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_harness_overhead(benchmark, mode, capsys):
    torch.manual_seed(0)
    model = vit.create("Mu", 4, image_size=IMAGE_SIZE, num_classes=NUM_CLASSES)
    batch = BATCH[mode]

    def compare() -> dict:
        harness, bare = [], []
        for i in range(ROUNDS):
            pair = ((harness, harness_img_per_s), (bare, bare_img_per_s))
            for out, measure in (pair if i % 2 == 0 else pair[::-1]):
                out.append(measure(model, mode, batch))
        ratios = [h / b for h, b in zip(harness, bare)]
        return {"harness_img_per_s": statistics.median(harness), "bare_img_per_s": statistics.median(bare),
                "ratio": statistics.median(ratios), "best_ratio": max(harness) / max(bare),
                "medians_ratio": statistics.median(harness) / statistics.median(bare), "round_ratios": ratios}

    result = benchmark.pedantic(compare, rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    with capsys.disabled():
        rounds = ", ".join(f"{r:.3f}" for r in result["round_ratios"])
        print(f"\n{mode}: harness {result['harness_img_per_s']:.1f} img/s, bare {result['bare_img_per_s']:.1f} img/s "
              f"(medians); ratio {result['ratio']:.3f} (median of rounds; of the best rounds "
              f"{result['best_ratio']:.3f}, of the medians {result['medians_ratio']:.3f}); per round {rounds}")
    assert result["ratio"] >= MIN_RATIO
