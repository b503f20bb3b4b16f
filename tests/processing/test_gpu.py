"""GPU utilisation and memory through NVML, against a stand-in shaped like ``pynvml``'s
documented API (no GPU here); and, with the real ``pynvml`` on this GPU-less machine,
that nothing is read and one line says why."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_rollout._processing.gpu import (
    METRIC_GPU_MEMORY_LIMIT,
    METRIC_GPU_MEMORY_USAGE,
    METRIC_GPU_UTILIZATION,
    OFF_LINE,
    GpuReader,
    GpuSampler,
    active_sampler,
    register_gpu_instruments,
    start_gpu,
)
from otel_rollout.testing import make_test_env

GiB = 2**30


class NVMLError(Exception):
    pass


class StandInNVML:
    """The functions of ``pynvml`` that are read, over GPUs given as dicts
    (``uuid``, ``name``, ``gpu`` percent, ``used``/``total`` bytes)."""

    def __init__(self, gpus: list[dict], *, init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.shut = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h]["uuid"]

    def nvmlDeviceGetName(self, h: int) -> bytes:  # older pynvml gives bytes
        return self.gpus[h]["name"].encode()

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        g = self.gpus[h]
        if g.get("lost"):
            raise NVMLError("GPU is lost")
        return SimpleNamespace(gpu=g["gpu"], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        g = self.gpus[h]
        return SimpleNamespace(used=g["used"], total=g["total"], free=g["total"] - g["used"])


def two_gpus() -> StandInNVML:
    return StandInNVML([
        {"uuid": "GPU-aaaa", "name": "NVIDIA H100", "gpu": 90, "used": 30 * GiB, "total": 80 * GiB},
        {"uuid": "GPU-bbbb", "name": "NVIDIA H100", "gpu": 10, "used": 5 * GiB, "total": 80 * GiB},
    ])  # fmt: skip


def points(reader: InMemoryMetricReader) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    out.setdefault(m.name, {})[p.attributes["hw.id"]] = p.value
    return out


def test_each_gpu_is_a_series_of_utilisation_and_memory():
    reader, line = GpuReader.open(two_gpus())
    assert reader is not None and line == ("GPU: 2 x NVIDIA H100, read through NVML")
    metrics = InMemoryMetricReader()
    register_gpu_instruments(MeterProvider(metric_readers=[metrics]).get_meter("t"), reader)
    got = points(metrics)
    assert got[METRIC_GPU_UTILIZATION] == {"GPU-aaaa": 0.9, "GPU-bbbb": 0.1}
    assert got[METRIC_GPU_MEMORY_USAGE] == {"GPU-aaaa": 30 * GiB, "GPU-bbbb": 5 * GiB}
    assert got[METRIC_GPU_MEMORY_LIMIT] == {"GPU-aaaa": 80 * GiB, "GPU-bbbb": 80 * GiB}


def test_the_series_carry_the_hardware_conventions_attributes():
    reader, _ = GpuReader.open(two_gpus())
    metrics = InMemoryMetricReader()
    register_gpu_instruments(MeterProvider(metric_readers=[metrics]).get_meter("t"), reader)
    data = metrics.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
    util = next(m for m in data if m.name == METRIC_GPU_UTILIZATION)
    assert util.unit == "1"
    assert dict(util.data.data_points[0].attributes) == {
        "hw.id": "GPU-aaaa", "hw.name": "NVIDIA H100", "hw.type": "gpu", "hw.vendor": "NVIDIA",
    }  # fmt: skip


def test_a_gpu_nvml_cannot_read_is_left_out_not_an_error():
    nvml = two_gpus()
    reader, _ = GpuReader.open(nvml)
    nvml.gpus[1]["lost"] = True
    assert [r.uuid for r in reader.read()] == ["GPU-aaaa"]


@pytest.mark.parametrize(
    ("nvml", "why"),
    [
        (StandInNVML([], init_error="Driver Not Loaded"), "no NVIDIA driver: Driver Not Loaded"),
        (StandInNVML([], init_error="x" * 80), "no NVIDIA driver)"),
        (StandInNVML([]), "NVML sees no GPU here"),
    ],
)
def test_without_a_gpu_nothing_is_read_and_one_line_says_why(nvml, why):
    reader, line = GpuReader.open(nvml)
    assert reader is None
    assert line.startswith("GPU: not read (") and why in line and "\n" not in line
    assert len("otel-rollout: " + line) <= 80


@pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py is not installed"
)
def test_the_real_pynvml_on_this_gpu_less_machine_reads_nothing():
    setup = start_gpu(1.0, MeterProvider())
    assert setup.sampler is None and active_sampler() is None
    assert setup.line.startswith("GPU: not read (no NVIDIA driver")


def test_a_zero_interval_reads_nothing():
    nvml = two_gpus()
    setup = start_gpu(0, MeterProvider(), nvml)
    assert (setup.sampler, setup.line) == (None, OFF_LINE)


def test_samples_are_the_mean_over_the_gpus_on_the_given_clock():
    reader, _ = GpuReader.open(two_gpus())
    ticks = iter([1_000, 2_000, 3_000])
    sampler = GpuSampler(reader, 1.0, clock=lambda: next(ticks))
    for _ in range(3):
        sampler.sample()
    assert sampler.samples(0, 10_000) == [(1_000, 0.5), (2_000, 0.5), (3_000, 0.5)]
    assert sampler.samples(1_500, 3_000) == [(2_000, 0.5), (3_000, 0.5)]


def test_the_sampler_keeps_a_bounded_ring():
    reader, _ = GpuReader.open(two_gpus())
    ticks = iter(range(10))
    sampler = GpuSampler(reader, 1.0, clock=lambda: next(ticks), maxlen=4)
    for _ in range(10):
        sampler.sample()
    assert [t for t, _ in sampler.samples(0, 100)] == [6, 7, 8, 9]


def test_a_bad_interval_is_refused_naming_it():
    reader, _ = GpuReader.open(two_gpus())
    with pytest.raises(ValueError, match=r"interval_s must be > 0 seconds, got -1"):
        GpuSampler(reader, -1)


def test_configure_starts_sampling_and_shutdown_stops_it_and_closes_nvml():
    nvml = two_gpus()
    setup = start_gpu(0.01, MeterProvider(), nvml)
    try:
        assert setup.sampler is not None and active_sampler() is setup.sampler
    finally:
        setup.shutdown()
        setup.server_close()
    assert active_sampler() is None and nvml.shut == 1
    assert setup.sampler._thread is None


def test_each_part_of_a_step_gets_the_mean_gpu_utilisation_sampled_in_it():
    from otel_rollout import attributes as A
    from otel_rollout._processing.gpu import set_active_sampler
    from otel_rollout.testing import ManualClock

    env = make_test_env(clock=ManualClock())
    nvml = two_gpus()
    reader, _ = GpuReader.open(nvml)
    sampler = GpuSampler(reader, 1.0, clock=env.clock)
    set_active_sampler(sampler)

    def sample_at(gpu_percent: tuple[int, int]) -> None:
        nvml.gpus[0]["gpu"], nvml.gpus[1]["gpu"] = gpu_percent
        sampler.sample()

    try:
        with env.tracer.step(1) as step:
            with step.phase("run_training"):
                for _ in range(2):
                    env.clock.advance(ms=5)
                    sample_at((90, 80))
                env.clock.advance(ms=20)
            with step.phase("sync_weights"):
                env.clock.advance(ms=5)
                sample_at((10, 0))
                env.clock.advance(ms=5)
            env.clock.advance(ms=5)
            sample_at((0, 0))
            env.clock.advance(ms=5)
    finally:
        set_active_sampler(None)
        env.shutdown()
    assert step.gpu_utilization_by_part == pytest.approx(
        {"run_training": 0.85, "sync_weights": 0.05, "other": 0.0}
    )
    assert step.gpu_utilization == pytest.approx((0.85 * 2 + 0.05) / 4)
    (span,) = env.spans(A.SPAN_STEP)
    assert span.attributes[A.STEP_GPU_UTILIZATION + ".run_training"] == pytest.approx(0.85)


def test_without_a_gpu_a_step_has_no_gpu_figures():
    from otel_rollout import attributes as A
    from otel_rollout.testing import ManualClock

    env = make_test_env(clock=ManualClock())
    with env.tracer.step(1) as step, step.phase("run_training"):
        env.clock.advance(ms=1)
    env.shutdown()
    assert step.gpu_utilization is None and step.gpu_utilization_by_part is None
    assert A.STEP_GPU_UTILIZATION not in env.spans(A.SPAN_STEP)[0].attributes
