"""The machine's GPUs through NVML (``pynvml``, the ``[gpu]`` extra): ``hw.gpu.*``
observable instruments, and a sampler of utilisation on the steps' time axis (its own
thread: a phase's mean needs readings while it runs). docs/step.md lists what is read;
without NVML, a driver or a GPU nothing is, and one line says why."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import internal_error
from otel_rollout._base.fork import reset_in_child
from otel_rollout._version import __version__

#: The hardware semantic conventions' GPU instruments (Development status) and attributes.
METRIC_GPU_UTILIZATION = "hw.gpu.utilization"
METRIC_GPU_MEMORY_USAGE = "hw.gpu.memory.usage"
METRIC_GPU_MEMORY_LIMIT = "hw.gpu.memory.limit"
HW_ID, HW_NAME, HW_TYPE, HW_VENDOR = "hw.id", "hw.name", "hw.type", "hw.vendor"
INSTALL_LINE = "pip install 'otel-rollout[gpu]'"
#: Samples a sampler keeps (an hour at one a second).
MAX_SAMPLES = 3600
#: The longest line said about the GPUs: 80 columns less the announce's prefix.
MAX_LINE = 80 - len("otel-rollout: ")


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one instant: utilisation (0..1) and memory (bytes)."""

    index: int
    uuid: str
    name: str
    utilization: float
    memory_used: int
    memory_total: int


def fit_line(line: str, short: str) -> str:
    """``line`` if it fits :data:`MAX_LINE` columns, else ``short``."""
    return line if len(line) <= MAX_LINE else short


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class GpuReader:
    """The GPUs NVML sees, read on demand. ``nvml`` is the ``pynvml`` module (or a
    stand-in with its functions: ``nvmlInit``, ``nvmlDeviceGetCount``,
    ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetName``,
    ``nvmlDeviceGetUtilizationRates``, ``nvmlDeviceGetMemoryInfo``, ``nvmlShutdown``)."""

    def __init__(self, nvml: Any, handles: Sequence[tuple[int, Any, str, str]]) -> None:
        self._nvml = nvml
        self._handles = tuple(handles)  # (index, handle, uuid, name)
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, nvml: Any = None) -> tuple[GpuReader | None, str]:
        """The reader, and one line saying what it reads or why nothing is read."""
        if nvml is None:
            try:
                import pynvml

                nvml = pynvml
            except ImportError:
                return None, f"GPU: not read (no nvidia-ml-py: {INSTALL_LINE})"
        try:
            nvml.nvmlInit()
        except Exception as err:
            return None, fit_line(f"GPU: not read (no NVIDIA driver: {_text(err)})",
                                  "GPU: not read (no NVIDIA driver)")  # fmt: skip
        try:
            handles = []
            for i in range(int(nvml.nvmlDeviceGetCount())):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid, name = nvml.nvmlDeviceGetUUID(h), nvml.nvmlDeviceGetName(h)
                handles.append((i, h, _text(uuid), _text(name)))
        except Exception as err:
            _shutdown(nvml)
            return None, fit_line(f"GPU: not read (NVML listed no GPU: {_text(err)})",
                                  "GPU: not read (NVML error)")  # fmt: skip
        if not handles:
            _shutdown(nvml)
            return None, "GPU: not read (NVML sees no GPU here)"
        names = sorted({name for _, _, _, name in handles})
        what = f"{len(handles)} x {names[0]}" if len(names) == 1 else ", ".join(names)
        short = f"GPU: {len(handles)}, read through NVML"
        return cls(nvml, handles), fit_line(f"GPU: {what}, read through NVML", short)

    @property
    def count(self) -> int:
        return len(self._handles)

    def read(self) -> list[GpuReading]:
        """Every GPU now; a GPU NVML cannot read (lost, reset) is left out."""
        out: list[GpuReading] = []
        nvml = self._nvml
        with self._lock:
            if self._closed:
                return out
            for index, h, uuid, name in self._handles:
                try:
                    util = nvml.nvmlDeviceGetUtilizationRates(h)
                    mem = nvml.nvmlDeviceGetMemoryInfo(h)
                except Exception:
                    continue
                util_ = int(util.gpu) / 100.0
                out.append(GpuReading(index, uuid, name, util_, int(mem.used), int(mem.total)))
        return out

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                _shutdown(self._nvml)


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def _attributes(r: GpuReading) -> dict[str, str]:
    return {HW_ID: r.uuid, HW_NAME: r.name, HW_TYPE: "gpu", HW_VENDOR: "NVIDIA"}


def register_gpu_instruments(meter: Any, reader: GpuReader) -> list[Any]:
    """The observable instruments, read from ``reader`` at each collection."""
    from opentelemetry.metrics import Observation

    def observe(value: Callable[[GpuReading], float]) -> Callable[[Any], Iterable[Any]]:
        def callback(options: Any) -> Iterable[Any]:
            try:
                return [Observation(value(r), _attributes(r)) for r in reader.read()]
            except Exception as err:
                internal_error("GPU gauges", err)
                return []

        return callback

    return [
        meter.create_observable_gauge(
            METRIC_GPU_UTILIZATION, [observe(lambda r: r.utilization)], unit="1",
            description="Fraction of time one or more kernels ran on the GPU (NVML)",
        ),
        meter.create_observable_up_down_counter(
            METRIC_GPU_MEMORY_USAGE, [observe(lambda r: r.memory_used)], unit="By",
            description="GPU memory used (NVML)",
        ),
        meter.create_observable_up_down_counter(
            METRIC_GPU_MEMORY_LIMIT, [observe(lambda r: r.memory_total)], unit="By",
            description="GPU memory size (NVML)",
        ),
    ]  # fmt: skip


class GpuSampler:
    """Reads the GPUs' utilisation every ``interval_s`` into a ring of ``(epoch ns, mean
    utilisation over the GPUs)``, timed on ``clock``."""

    def __init__(self, reader: GpuReader, interval_s: float = 1.0, *,
                 clock: Callable[[], int] = now_ns, maxlen: int = MAX_SAMPLES) -> None:  # fmt: skip
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s!r}")
        self._reader = reader
        self._interval = float(interval_s)
        self._clock = clock
        self._ring: deque[tuple[int, float]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        reset_in_child(self, GpuSampler._forget)

    def _forget(self) -> None:  # a forked child has no sampling thread
        self._thread = None
        self._ring.clear()

    def sample(self) -> tuple[int, float] | None:
        """Read once now and keep the sample (the thread calls this)."""
        readings = self._reader.read()
        if not readings:
            return None
        value = sum(r.utilization for r in readings) / len(readings)
        sample = (self._clock(), value)
        with self._lock:
            self._ring.append(sample)
        return sample

    def samples(self, start_ns: int, end_ns: int) -> list[tuple[int, float]]:
        """The samples taken in ``[start_ns, end_ns]``, oldest first."""
        with self._lock:
            return [s for s in self._ring if start_ns <= s[0] <= end_ns]

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        thread = threading.Thread(target=self._run, name="otel-rollout-gpu", daemon=True)
        self._thread = thread
        thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as err:  # never let a driver hiccup end the sampling
                internal_error("GPU sampling", err)
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._interval + 1.0)


_active: GpuSampler | None = None


def active_sampler() -> GpuSampler | None:
    """The sampler ``configure()`` started, if the machine has a GPU it reads."""
    return _active


def set_active_sampler(sampler: GpuSampler | None) -> None:
    global _active
    _active = sampler


OFF_LINE = "GPU: not read (OTEL_ROLLOUT_GPU_INTERVAL_S=0)"


@dataclass
class GpuSetup:
    """What ``configure()`` set up for the GPUs: the sampler (``None``: nothing is read)
    and the one line saying what is read or why not."""

    sampler: GpuSampler | None
    line: str
    reader: GpuReader | None = None

    # closed with the pipeline's servers (``Rollout._closers``)
    def shutdown(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def server_close(self) -> None:
        set_active_sampler(None)
        if self.reader is not None:
            self.reader.close()


def start_gpu(interval_s: float, meter_provider: Any, nvml: Any = None) -> GpuSetup:
    """``configure()``'s GPU reading: open NVML, register the ``hw.gpu.*`` instruments,
    start sampling every ``interval_s`` (0: off). Never raises."""
    if not interval_s > 0:
        return GpuSetup(None, OFF_LINE)
    reader, line = GpuReader.open(nvml)
    if reader is None:
        return GpuSetup(None, line)
    try:
        meter = meter_provider.get_meter("otel_rollout.gpu", __version__)
        register_gpu_instruments(meter, reader)
        sampler = GpuSampler(reader, interval_s)
        sampler.start()
    except Exception as err:
        internal_error("GPU reading", err)
        reader.close()
        return GpuSetup(None, "GPU: not read (setting NVML up failed; see the log)")
    set_active_sampler(sampler)
    return GpuSetup(sampler, line, reader)
