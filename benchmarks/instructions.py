"""Instruction counts per 10-turn trajectory under valgrind: a ratio that noise cannot move.

The CPU-time ratio of ``overhead.py`` swings by 0.1-0.2 on a shared 2-core machine.
``valgrind --tool=callgrind`` counts the instructions the interpreter executes, whatever
else runs: two runs of 200 trajectories differed by 0.6% per trajectory (hash seeds and
garbage collection still vary a little); use at least 200. Each mode runs in its own process
twice (warm-up only, then warm-up plus ``--trajectories``); the difference is the cost of
the trajectories alone, start-up and imports cancelled out.

Two columns: the **agent thread** (the thread running the trajectories: what delays the
agent loop) and the **process** (every thread: what the CPU pays). The batch span
processor exports on its own thread, and metrics are collected on their own thread every
``COLLECT_EVERY`` trajectories, as a periodic reader or a Prometheus scrape would; the
histogram records of ended trajectories wait for that collection.

    python benchmarks/instructions.py [--trajectories 200] [--modes bare default ...]

Three ratios are the targets of docs/performance.md: the whole default pipeline
(``configure()``: processor, histograms, the trace file) against the bare SDK with the
official OTLP JSON ``FileSpanExporter`` (``default`` / ``bare_file``); spans and
histograms against the same seven records made by hand on the bare SDK, same attributes
and exemplars (``ours`` / ``bare_hist``); and the agent thread against the bare SDK
(``ours`` / ``bare``). ``bare_otlp`` counts the official OTLP protobuf encoding (what the
gRPC and HTTP exporters do before sending), printed per span. Every mode ends with its
spans exported within the count (a flush, or ``shutdown()`` for ``default``).

The last line is the cost of the GenAI client metrics (``GenAIMetricsProcessor``: a
duration and two token-usage records per generate) as a share of otel-rollout's own
per-trajectory overhead over the bare SDK, for the process.

Needs ``valgrind`` (Debian package ``valgrind``); takes about seven minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: Trajectories between two metric collections (a periodic reader exports every 60 s).
COLLECT_EVERY = 50
#: Turns of a trajectory (as in overhead.py).
TURNS = 10

MODES = {
    "bare": "bare SDK + batch export",
    "bare_hist": "bare SDK + the 7 histogram records by hand",
    "nometrics": "otel-rollout, no histograms",
    "ours": "otel-rollout + histograms",
    "tokens": "otel-rollout + histograms, token counts recorded",
    "genai": "as tokens + GenAI client metrics",
    "bare_file": "bare SDK + official OTLP JSON FileSpanExporter",
    "default": "configure(): the whole default pipeline",
    "bare_otlp": "bare SDK + official OTLP protobuf encoding",
}


#: (label, mode, baseline mode) of the ratios printed.
RATIOS = [
    ("whole default pipeline / bare SDK + official file", "default", "bare_file"),
    ("spans + histograms / same by hand on bare SDK", "ours", "bare_hist"),
    ("ratio otel-rollout / bare SDK", "ours", "bare"),
    ("ratio without histograms / bare SDK", "nometrics", "bare"),
]


def tokens_tree(tracer) -> None:
    """The 10-turn trajectory of ``overhead.rollout_tree``, each generate recording usage."""
    with tracer.trajectory("x", env="bench", model="m") as traj:
        with traj.env_setup():
            pass
        for _ in range(10):
            with traj.generate() as gen:
                gen.record(input_tokens=512, output_tokens=128, finish_reasons="stop")
            with traj.env_step():
                pass
        with traj.env_teardown():
            pass


class Collector:
    """Collects a metric reader on its own thread when asked, as a periodic reader does;
    the caller waits, so the number of collections is the same on every run."""

    def __init__(self, reader) -> None:
        self._reader = reader
        self._asked = threading.Event()
        self._done = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._asked.wait()
            self._asked.clear()
            if self._stop:
                return
            self._reader.get_metrics_data()
            self._done.set()

    def collect(self) -> None:
        self._done.clear()
        self._asked.set()
        self._done.wait()

    def stop(self) -> None:
        self._stop = True
        self._asked.set()
        self._thread.join()


def hand_histograms(meters):
    """The three histograms of otel-rollout, made on a bare SDK meter: a function that
    records a trajectory's seven values, as a hand-rolled timer would at its end, with the
    same attributes and the root's context (exemplars)."""
    from opentelemetry import trace

    from otel_rollout import attributes as A

    meter = meters.get_meter("bench")
    duration = meter.create_histogram(
        A.METRIC_DURATION, unit="s", explicit_bucket_boundaries_advisory=list(A.DURATION_BUCKETS)
    )
    phase = meter.create_histogram(
        A.METRIC_PHASE_DURATION,
        unit="s",
        explicit_bucket_boundaries_advisory=list(A.DURATION_BUCKETS),
    )
    turns = meter.create_histogram(
        A.METRIC_TURNS, unit="{turn}", explicit_bucket_boundaries_advisory=list(A.TURN_BUCKETS)
    )
    base = {A.STATUS: "ok", A.ENV_CLASS: "bench", A.GEN_AI_REQUEST_MODEL: "m"}
    bands = [{**base, A.PHASE: band} for band in A.ALL_BANDS]

    def record(root, e2e: float, per_band: list[float], n: int) -> None:
        ctx = trace.set_span_in_context(root)
        duration.record(e2e, base, context=ctx)
        for attrs, value in zip(bands, per_band, strict=True):
            phase.record(value, attrs, context=ctx)
        turns.record(n, base, context=ctx)

    return record


def timed_bare_tree(tracer, record) -> None:
    """``overhead.bare_tree``'s spans, each band's time summed by hand from the spans'
    own times, and the seven records made when the trajectory ends."""
    from opentelemetry.trace import SpanKind

    tid = "x"
    llm = env = 0
    with tracer.start_as_current_span("trajectory", attributes={
        "rollout.trajectory.id": tid, "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": tid, "rollout.env.class": "bench",
        "gen_ai.agent.name": "bench", "gen_ai.request.model": "m",
    }) as root:  # fmt: skip
        with tracer.start_as_current_span(
            "env_setup", attributes={"rollout.phase": "env_setup"}
        ) as s:
            pass
        setup = s.end_time - s.start_time
        for i in range(TURNS):
            with tracer.start_as_current_span("generate", kind=SpanKind.CLIENT, attributes={
                "rollout.phase": "llm", "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": tid, "gen_ai.request.model": "m", "rollout.turn": i,
            }) as s:  # fmt: skip
                pass
            llm += s.end_time - s.start_time
            with tracer.start_as_current_span("env_step", attributes={
                "rollout.phase": "env", "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "bench", "gen_ai.tool.type": "function",
                "gen_ai.conversation.id": tid, "rollout.turn": i,
            }) as s:  # fmt: skip
                pass
            env += s.end_time - s.start_time
        with tracer.start_as_current_span(
            "env_teardown", attributes={"rollout.phase": "env_teardown"}
        ) as s:
            pass
        teardown = s.end_time - s.start_time
    e2e = root.end_time - root.start_time
    other = e2e - llm - env - setup - teardown
    record(root, e2e / 1e9, [x / 1e9 for x in (llm, env, setup, teardown, other)], TURNS)


def _run_one(mode: str, n: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from overhead import NullExporter, bare_tree, rollout_tree

    from otel_rollout import RolloutTracer
    from otel_rollout.sdk import BreakdownProcessor, GenAIMetricsProcessor

    tmp = tempfile.mkdtemp()
    if mode == "default":
        import otel_rollout

        rollout = otel_rollout.configure(local=True, output_dir=tmp, service_name="bench")
        for _ in range(20 + n):
            rollout_tree(rollout.tracer)
        rollout.shutdown(60)
        return
    provider = TracerProvider()
    collector = None
    exporter = NullExporter()
    if mode in ("bare", "bare_file", "bare_otlp"):
        tracer, tree = provider.get_tracer("bench"), bare_tree
        if mode == "bare_file":
            from opentelemetry.exporter.otlp.json.file import FileSpanExporter

            exporter = FileSpanExporter(Path(tmp, "traces.jsonl"))
        elif mode == "bare_otlp":
            exporter = ProtobufEncoding()
    elif mode == "bare_hist":
        reader = InMemoryMetricReader()
        meters = MeterProvider(metric_readers=[reader])
        collector = Collector(reader)
        record = hand_histograms(meters)
        tracer = provider.get_tracer("bench")

        def tree(t) -> None:
            timed_bare_tree(t, record)
    else:
        reader = InMemoryMetricReader()
        meters = MeterProvider(metric_readers=[reader])
        collector = Collector(reader)
        processor = BreakdownProcessor(meters, record_metrics=mode != "nometrics")
        provider.add_span_processor(processor)
        if mode == "genai":
            provider.add_span_processor(GenAIMetricsProcessor(meters))
        tree = tokens_tree if mode in ("tokens", "genai") else rollout_tree
        tracer = RolloutTracer(provider, processor=processor)
    # A long delay: the export thread wakes only when a batch of 512 spans is ready.
    batch = BatchSpanProcessor(exporter, schedule_delay_millis=600_000, max_queue_size=1 << 20)
    provider.add_span_processor(batch)
    for i in range(20 + n):
        tree(tracer)
        if collector is not None and (i + 1) % COLLECT_EVERY == 0:
            collector.collect()
    if collector is not None:
        collector.collect()
        collector.stop()
    batch.force_flush()  # every span encoded (the file modes write them all)


class ProtobufEncoding:
    """What the official OTLP gRPC and HTTP exporters do to a batch before sending it:
    ``encode_spans`` to the protobuf request, serialised (no network here)."""

    def export(self, spans):
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export import SpanExportResult

        encode_spans(spans).SerializeToString()
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def _count(mode: str, n: int) -> tuple[int, int]:
    """(agent thread, process) instructions of one run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
               f"--callgrind-out-file={out}",
               sys.executable, __file__, "--one", mode, str(n)]  # fmt: skip
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        per_thread = {}
        for path in Path(tmp).glob("callgrind.out-*"):
            match = re.search(r"^summary: (\d+)", path.read_text(errors="replace"), re.M)
            if match is not None:
                per_thread[int(path.name.rsplit("-", 1)[1])] = int(match.group(1))
    if 1 not in per_thread:
        raise RuntimeError(f"valgrind gave no count for the main thread: {sorted(per_thread)}")
    return per_thread[1], sum(per_thread.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trajectories", type=int, default=200, help="trajectories counted per run (default 200)"
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=list(MODES),
        default=list(MODES),
        help="the modes to count (default: all)",
    )
    parser.add_argument("--one", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _run_one(args.one[0], int(args.one[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind not found (Debian package valgrind)", file=sys.stderr)
        return 2
    n = args.trajectories
    agent: dict[str, float] = {}
    process: dict[str, float] = {}
    for m in args.modes:
        (a1, p1), (a0, p0) = _count(m, n), _count(m, 0)
        agent[m], process[m] = (a1 - a0) / n, (p1 - p0) / n
    print(f"{'per 10-turn trajectory, M instructions':<48}  agent thread   process")
    for m in args.modes:
        print(f"{MODES[m]:<48}: {agent[m] / 1e6:9.2f}  {process[m] / 1e6:9.2f}")
    for label, num, den in RATIOS:
        if num in agent and den in agent:
            ratios = agent[num] / agent[den], process[num] / process[den]
            print(f"{label:<48}: {ratios[0]:9.3f}  {ratios[1]:9.3f}")
    if {"ours", "nometrics"} <= set(agent):
        hist = (process["ours"] - process["nometrics"]) / 7
        print(f"{'per histogram record (7 per trajectory)':<48}: {hist / 1e3:9.1f} k instructions")
    if {"genai", "tokens", "bare"} <= set(agent):
        share = (process["genai"] - process["tokens"]) / (process["tokens"] - process["bare"])
        print(f"{'GenAI client metrics / otel-rollout overhead':<48}: {share:9.3f}")
    if {"bare_otlp", "bare"} <= set(agent):
        spans = 2 + 2 * 10 + 1
        per_span = (process["bare_otlp"] - process["bare"]) / spans
        print(f"{'official OTLP protobuf encoding, per span':<48}: {per_span / 1e3:9.1f} k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
