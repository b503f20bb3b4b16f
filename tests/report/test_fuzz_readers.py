"""``report`` and ``top``'s readers under fuzzing: random documents of the OTLP JSON shape
(odd ids, times, numbers, texts, keys) and random mutations of a real trace file. Neither
ever raises; the report's JSON is the same with the fast reader on and off; a mutation
that leaves a line valid JSON loses at most the trajectories it touched."""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stdout

import pytest
from _otel_env import clean_otel_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_rollout import attributes as A
from otel_rollout import configure
from otel_rollout.cli import main
from otel_rollout.live._ingest import Ingest
from otel_rollout.live._state import LiveState
from otel_rollout.report import _files

T0 = 1_700_000_000_000_000_000
FUZZ = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# --- values as odd as valid JSON allows --------------------------------------------------------
texts = st.one_of(st.text(max_size=12), st.sampled_from(["t\ud800", "e\udcff", "", "llm", "env"]))
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([10**400, 2**63, 2**63 - 1, -1, 0]),
)
number_texts = st.one_of(
    numbers.map(str),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e5", "1.0", "1_000", " 7", "x", ""]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)


@st.composite
def values(draw, depth=0):
    kind = draw(st.sampled_from(["string", "int", "double", "bool", "array", "odd"]))
    if kind == "string":
        return {"stringValue": draw(st.one_of(texts, scalars))}
    if kind == "int":
        return {"intValue": draw(st.one_of(number_texts, numbers, scalars))}
    if kind == "double":
        return {"doubleValue": draw(st.one_of(numbers, number_texts))}
    if kind == "bool":
        return {"boolValue": draw(st.one_of(st.booleans(), scalars))}
    if kind == "array" and depth < 2:
        return {"arrayValue": {"values": draw(st.lists(values(depth + 1), max_size=3))}}
    return draw(st.one_of(scalars, st.just({}), st.just({"kvlistValue": {}})))


KEYS = [A.PHASE, A.TRAJECTORY_ID, A.ENV_CLASS, A.GEN_AI_REQUEST_MODEL, A.REWARD, A.STEP,
        A.POLICY_VERSION, A.BATCH_ID, A.VLLM_TIME_IN_QUEUE, A.VLLM_TIME_IN_PREFILL,
        A.VLLM_TIME_IN_DECODE, A.LOOP_OWN_NS, A.LOOP_BLOCKED_NS, A.STATUS, "error.type",
        A.EXPORT_LOST_PREFIX + "queue_full", "rollout.run.id", "service.name",
        A.STEP_WALL, A.STEP_PHASE, A.STEP_TRAINER, A.STEP_GPU_UTILIZATION,
        A.STEP_GPU_UTILIZATION + ".train", A.ASYNC_PREFIX + "staleness",
        *(f"{A.STEP_SERIES_PREFIX}{n}.{part}" for n in (A.SERIES_BUFFER_DEPTH,
          A.SERIES_GPU_UTILIZATION) for part in ("offset_ns", "value"))]  # fmt: skip
keys = st.one_of(st.sampled_from(KEYS), texts, st.integers(), st.none())


@st.composite
def attributes(draw):
    return [{"key": draw(keys), "value": draw(values())} for _ in range(draw(st.integers(0, 5)))]


ids16 = st.one_of(st.integers(0, 7).map(lambda i: f"{i + 1:016x}"), texts,
                  st.sampled_from(["AAAAAAAAAAE=", "0x00000000000001", None]))  # fmt: skip
ids32 = st.one_of(st.integers(0, 3).map(lambda i: f"{i + 1:032x}"), texts, st.just(None))
times = st.one_of(st.integers(0, 1000).map(lambda d: str(T0 + d)), number_texts, numbers,
                  st.none())  # fmt: skip


@st.composite
def spans(draw):
    sp = {"traceId": draw(ids32), "spanId": draw(ids16), "name": draw(st.one_of(texts, scalars)),
          "startTimeUnixNano": draw(times), "endTimeUnixNano": draw(times),
          "attributes": draw(attributes())}  # fmt: skip
    if draw(st.booleans()):
        sp["parentSpanId"] = draw(ids16)
    if draw(st.booleans()):
        sp["status"] = draw(st.one_of(st.just({"code": 2}), st.just({}), scalars))
    return sp


@st.composite
def documents(draw):
    rs = []
    for _ in range(draw(st.integers(1, 3))):
        r = {"resource": {"attributes": draw(attributes())}}
        if draw(st.integers(0, 3)):  # else a loss record's shape: no spans
            r["scopeSpans"] = [{"spans": draw(st.lists(spans(), max_size=6))}]
        rs.append(r)
    return {"resourceSpans": rs}


def _report(path, monkeypatch=None, fast=True):
    if not fast:
        monkeypatch.setattr(_files, "typed_rows", lambda line: None)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["report", str(path), "--format", "json"])
    assert code in (0, 1)  # 1: no trajectory in it
    return json.loads(out.getvalue())


def _top(lines):
    ingest = Ingest(LiveState())
    for line in lines:
        ingest.line(line, "fuzz")
    return ingest


@FUZZ
@given(docs=st.lists(documents(), min_size=1, max_size=4))
def test_random_otlp_documents_never_raise_and_read_the_same_both_ways(tmp_path, docs):
    path = tmp_path / "fuzz.jsonl"
    lines = [json.dumps(d) for d in docs]  # NaN and Infinity as JSON literals
    path.write_text("".join(x + "\n" for x in lines))
    fast = _report(path)
    with pytest.MonkeyPatch.context() as mp:
        general = _report(path, mp, fast=False)
    assert fast == general
    _top(lines)


# --- mutations of a real trace file ------------------------------------------------------------


@pytest.fixture(scope="module")
def real_lines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("real")
    with pytest.MonkeyPatch.context() as mp:
        clean_otel_env(mp)
        rollout = configure(local=True, output_dir=folder, metrics_exporter="none",
                            service_name="fuzz", run_id="r1", summary_stream=None)  # fmt: skip
        with rollout.tracer.batch(1):
            for i in range(8):
                with rollout.tracer.trajectory(f"t{i}", env="e", model="m") as t:
                    with t.generate() as g:
                        g.set_attributes({A.VLLM_TIME_IN_QUEUE: 0.001})
                    with t.env_step():
                        pass
                    t.set_reward(0.5)
        assert rollout.shutdown()
    return [json.loads(x) for x in rollout.trace_file.read_text().splitlines() if x]


def _nodes(node, path=()):
    """Every (path, value) inside a JSON document."""
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nodes(v, (*path, i))


def _set(doc, path, value):
    for step in path[:-1]:
        doc = doc[step]
    doc[path[-1]] = value


replacements = st.one_of(scalars, values(), st.just([]), st.just({}),
                         st.recursive(st.none(), lambda c: st.lists(c, max_size=2), max_leaves=6),
                         st.integers(0, 4).map(lambda n: "[" * n))  # fmt: skip


@FUZZ
@given(data=st.data())
def test_mutations_of_a_real_trace_file_never_raise_and_lose_at_most_what_they_touch(
    tmp_path, real_lines, data
):
    docs = copy.deepcopy(real_lines)
    touched_traces = set()
    for _ in range(data.draw(st.integers(1, 3))):
        line = data.draw(st.integers(0, len(docs) - 1))
        nodes = [p for p, _ in _nodes(docs[line]) if p]
        path = data.draw(st.sampled_from(nodes))
        _set(docs[line], path, data.draw(replacements))
        # the trajectory whose span it was, or every trajectory of the line
        touched_traces.add((line, path[:6] if len(path) >= 6 else None))
    path = tmp_path / "mutated.jsonl"
    lines = [json.dumps(d) for d in docs]
    path.write_text("".join(x + "\n" for x in lines))
    out = _report(path)
    with pytest.MonkeyPatch.context() as mp:
        assert _report(path, mp, fast=False) == out
    # a mutation inside one span loses that span's trajectory at most; one above the
    # spans (a resource, a whole line) may lose the line's
    whole_lines = {line for line, at in touched_traces if at is None}
    per_line = [sum(1 for sp in _spans(d) if _is_root(sp)) for d in real_lines]
    lost_at_most = sum(per_line[i] for i in whole_lines) + len(touched_traces - {
        (line, None) for line in whole_lines})  # fmt: skip
    assert out.get("found", 0) >= sum(per_line) - lost_at_most
    _top(lines)


def _spans(doc):
    for rs in doc.get("resourceSpans") or ():
        for ss in rs.get("scopeSpans") or ():
            yield from ss.get("spans") or ()


def _is_root(sp):
    return any(kv.get("key") == A.TRAJECTORY_ID for kv in sp.get("attributes") or ())
