"""The lines the demo ends with: how to recompute its report and how to see its traces in
Jaeger, for the OTLP protocol in use (gRPC on 4317 by default, HTTP on 4318)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

JAEGER_IMAGE = "jaegertracing/jaeger:2.12.0"
GRPC_ENDPOINT = "http://localhost:4317"
HTTP_ENDPOINT = "http://localhost:4318"


def protocol(env: Mapping[str, str] | None = None) -> str:
    """The traces' OTLP protocol as configure() resolves it: the traces variable, then the
    general one, then ``grpc``."""
    env = os.environ if env is None else env
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = env.get(name, "").strip()
        if value:
            return value
    return "grpc"


def report_command(trace_file: Path) -> str:
    """``otel-rollout report DIR/traces-*-RUN*.jsonl``: this run's files, rotated ones too,
    short enough for one 80-column line."""
    name = trace_file.name
    parts = name.split("-", 3)  # traces, date, time, run id + suffix
    if len(parts) == 4 and parts[0] == "traces" and name.endswith(".jsonl"):
        name = f"traces-*-{parts[3][: -len('.jsonl')]}*.jsonl"
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
    grpc = [f"  OTEL_EXPORTER_OTLP_ENDPOINT={GRPC_ENDPOINT} otel-rollout demo"]
    http = [
        "  OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf \\",
        f"  OTEL_EXPORTER_OTLP_ENDPOINT={HTTP_ENDPOINT} otel-rollout demo",
    ]
    lines = [
        "Jaeger: docker run --rm -p 16686:16686 -p 4317:4317 -p 4318:4318 \\",
        f"  {JAEGER_IMAGE}",
        "then upload the trace file at http://localhost:16686 (Search > Upload),",
    ]
    if proto.startswith("http"):
        return [*lines, f"or export to it over OTLP/HTTP ({proto}, in use):", *http]
    return [*lines, "or export to it over OTLP/gRPC (the default protocol):", *grpc,
            "or over OTLP/HTTP:", *http]  # fmt: skip
