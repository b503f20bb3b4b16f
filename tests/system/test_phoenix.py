"""Seen in a GenAI-aware backend: a traced trajectory sent over OTLP to a real Arize Phoenix
server, and what Phoenix's REST API shows for it.

Phoenix runs from its own virtual environment (its dependencies would change this one's
OpenTelemetry versions): ``$PHOENIX_VENV`` or ``/work/venvs/phoenix``, made by ``.ci/run``.
Without it these tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_rollout import RolloutTracer
from otel_rollout import attributes as A
from otel_rollout.sdk import BreakdownProcessor

VENV = Path(os.environ.get("PHOENIX_VENV") or "/work/venvs/phoenix")
PHOENIX = VENV / "bin" / "phoenix"
START_TIMEOUT_S = 300.0  # first start runs its database migrations; two busy cores

pytestmark = pytest.mark.skipif(
    not PHOENIX.exists(),
    reason=f"Arize Phoenix is not installed in {VENV} (.ci/run makes it: "
    f"python3 -m venv {VENV} && {VENV}/bin/pip install arize-phoenix)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))},
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(
        [str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"phoenix exited with {proc.returncode}; see {work}/server.log")
            try:
                _get(f"{url}/v1/projects")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"phoenix did not start in {START_TIMEOUT_S:.0f} s")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _send_trajectory(url: str, trajectory_id: str) -> str:
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-rollout-test"}))
    provider.add_span_processor(BreakdownProcessor())
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{url}/v1/traces")))
    tracer = RolloutTracer(provider)
    with tracer.trajectory(trajectory_id, env="gsm8k", model="qwen3-8b") as traj:
        with traj.env_setup():
            pass
        for turn in range(2):
            with traj.generate(provider=A.PROVIDER_VLLM, temperature=0.7) as gen:
                gen.record(input_tokens=100 + turn, output_tokens=20 + turn, finish_reasons="stop")
            with traj.env_step(tool_call_id=f"call-{turn}") as step:
                step.set_reward(float(turn))
        traj.set_reward(1.0, label="correct")
        traj.set_reward(0.5, name="judge")
    provider.shutdown()
    return traj.trace_id


def _spans(url: str, trace_id: str, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        data = _get(f"{url}/v1/projects/default/spans?limit=1000")["data"]
        spans = [s for s in data if s["context"]["trace_id"] == trace_id]
        if len(spans) >= n or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


@pytest.mark.parametrize("opt_in", ["", A.SEMCONV_GENAI_LATEST])
def test_phoenix_shows_an_agent_run_with_llm_and_tool_calls(phoenix, monkeypatch, opt_in):
    monkeypatch.setenv(A.SEMCONV_OPT_IN_ENV, opt_in)
    trajectory_id = f"inst-7_0{opt_in}"
    trace_id = _send_trajectory(phoenix, trajectory_id)
    spans = _spans(phoenix, trace_id, 6)
    by_phase = {}
    for s in spans:
        by_phase.setdefault(s["attributes"].get(A.PHASE, "root"), []).append(s)
    (root,) = by_phase["root"]
    # the trajectory is an agent run, not an LLM call
    assert root["span_kind"] == "AGENT"
    # the generate spans are LLM calls with their token counts
    gens = by_phase[A.PHASE_LLM]
    assert [g["span_kind"] for g in gens] == ["LLM", "LLM"]
    tokens = sorted(
        (g["attributes"]["llm.token_count.prompt"], g["attributes"]["llm.token_count.completion"])
        for g in gens
    )
    assert tokens == [(100, 20), (101, 21)]
    assert {g["attributes"]["llm.model_name"] for g in gens} == {"qwen3-8b"}
    # the env steps are tool calls
    steps = by_phase[A.PHASE_ENV]
    assert [s["span_kind"] for s in steps] == ["TOOL", "TOOL"]
    assert {s["attributes"]["tool.name"] for s in steps} == {"gsm8k"}
    # the trajectory id groups it as a session
    assert root["attributes"]["session.id"] == trajectory_id
    sessions = _get(f"{phoenix}/v1/projects/default/sessions")["data"]
    assert trajectory_id in {s["session_id"] for s in sessions}
    # rewards arrive as the attributes on the spans; their evaluation events are log
    # records, and Phoenix takes traces only: none shows on a span
    assert root["attributes"][A.REWARD] == 1.0
    assert root["attributes"][A.REWARD_PREFIX + "judge"] == 0.5
    assert not [
        e for s in spans for e in s.get("events") or () if e["name"] == A.EVENT_EVALUATION_RESULT
    ]
    step_rewards = sorted(s["attributes"][A.STEP_REWARD] for s in steps)
    assert step_rewards == [0.0, 1.0]
    # env_setup has no GenAI operation: Phoenix leaves it UNKNOWN
    assert [s["span_kind"] for s in by_phase[A.PHASE_ENV_SETUP]] == ["UNKNOWN"]


def test_phoenix_makes_no_annotation_of_the_rewards(phoenix):
    """Stated in docs/semconv.md: Phoenix shows the rewards as span attributes but makes no
    annotation of them (annotations come through its own API)."""
    trace_id = _send_trajectory(phoenix, "inst-8_0")
    (root,) = [s for s in _spans(phoenix, trace_id, 6) if A.PHASE not in s["attributes"]]
    span_id = root["context"]["span_id"]
    annotations = _get(f"{phoenix}/v1/projects/default/span_annotations?span_ids={span_id}")
    assert annotations["data"] == []
