"""The lines the demo ends with: how to recompute its report and how to see its traces in
Jaeger, for the OTLP protocol in use (gRPC on 4317 by default, HTTP on 4318)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

JAEGER_IMAGE = "jaegertracing/jaeger:2.12.0"


def protocol(env: Mapping[str, str] | None = None) -> str:
    """The traces' OTLP protocol as configure() resolves it: the traces variable, then the
    general one, then ``grpc``."""
    env = os.environ if env is None else env
    return (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
            or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip() or "grpc")  # fmt: skip


#: ``traces-<date>-<time>-<run id>-<pid>-<random>.jsonl`` (configure()'s trace files).
_PER_PROCESS = re.compile(r"traces-\d{8}-\d{6}-(?P<run>.+)-\d+-[0-9a-f]+\.jsonl")


def report_command(trace_file: Path) -> str:
    """``otel-rollout report DIR/traces-*-RUN-*.jsonl``: this run's files (each process's,
    rotated ones too), short enough for one 80-column line."""
    m = _PER_PROCESS.fullmatch(trace_file.name)
    name = f"traces-*-{m['run']}-*.jsonl" if m else trace_file.name
    return f"otel-rollout report {trace_file.parent / name}"


def jaeger_hint(env: Mapping[str, str] | None = None) -> list[str]:
    """How to see the traces in Jaeger: the container (both OTLP ports published), the
    upload of the trace file, and the variables that export to it, the protocol in use
    first. When an endpoint is already set, where the spans went instead."""
    env = os.environ if env is None else env
    proto = protocol(env)
    endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())  # fmt: skip
    if endpoint:
        return [f"spans exported over OTLP ({proto}) to {endpoint}; the file is a copy"]
    grpc = ["  OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 otel-rollout demo"]
    http = ["  OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf \\",
            "  OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 otel-rollout demo"]  # fmt: skip
    lines = [
        "Jaeger: docker run --rm -p 16686:16686 -p 4317:4317 -p 4318:4318 \\",
        f"  {JAEGER_IMAGE}",
        "then upload the trace file at http://localhost:16686 (Search > Upload),",
    ]
    if proto.startswith("http"):
        return [*lines, f"or export to it over OTLP/HTTP ({proto}, in use):", *http]
    return [*lines, "or export to it over OTLP/gRPC (the default protocol):", *grpc,
            "or over OTLP/HTTP:", *http]  # fmt: skip
