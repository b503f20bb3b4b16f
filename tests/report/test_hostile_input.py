"""Trace files that are valid JSON but odd: ``report`` and ``top`` skip and count each odd
value, report the rest, and never end in a traceback.

The files are written by ``configure()``'s real file pipeline, then one value is changed
in them: what a writer of another version, a bug or a hand edit leaves in a file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _otel_env import clean_otel_env

from otel_rollout import attributes as A
from otel_rollout import configure
from otel_rollout.cli import main
from otel_rollout.live._ingest import LOSS_ODD_IN_FLIGHT, ODD_VALUES
from otel_rollout.report._documents import LOSS_ODD_KEY
from otel_rollout.report._model import LOSS_INVERTED_ROOT, LOSS_ODD_VALUE

N = 6
ENGINE = (A.VLLM_TIME_IN_QUEUE, A.VLLM_TIME_IN_PREFILL, A.VLLM_TIME_IN_DECODE)


def write_run(folder, n=N):
    """A real run's trace file: ``n`` trajectories of one generate and one env step, each
    generate span with the engine's timings; its lines as JSON documents."""
    rollout = configure(local=True, output_dir=folder, metrics_exporter="none",
                        service_name="odd", run_id="r1")  # fmt: skip
    with rollout.tracer.batch(1):
        for i in range(n):
            with rollout.tracer.trajectory(f"t{i}", env="e", model="m") as t:
                with t.generate() as g:
                    g.set_attributes({k: 0.001 for k in ENGINE})
                with t.env_step():
                    pass
                t.set_reward(0.5)
    assert rollout.shutdown()
    path = rollout.trace_file
    return path, [json.loads(line) for line in path.read_text().splitlines() if line]


def spans_of(docs):
    for doc in docs:
        for rs in doc.get("resourceSpans") or ():
            for ss in rs.get("scopeSpans") or ():
                yield from ss.get("spans") or ()


def has(span, key):
    return any(kv["key"] == key for kv in span["attributes"])


def set_attr(span, key, value):
    span["attributes"] = [kv for kv in span["attributes"] if kv["key"] != key]
    span["attributes"].append({"key": key, "value": value})


def rewrite(path, docs, extra=()):
    """``docs`` back into ``path`` (``NaN`` and ``Infinity`` as JSON literals, as Python's
    encoder writes them), then the ``extra`` lines as they are."""
    with path.open("w", encoding="utf-8", errors="surrogatepass") as f:
        for doc in docs:
            f.write(json.dumps(doc) + "\n")
        for line in extra:
            f.write(line + "\n")


@pytest.fixture
def run(tmp_path, monkeypatch):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("COLUMNS", "80")
    return write_run(tmp_path)


def report_json(path, capsys):
    assert main(["report", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def top_screen(path, capsys):
    assert main(["top", "--once", str(path)]) == 0
    return capsys.readouterr().out


def generate_span(docs):
    return next(s for s in spans_of(docs) if s["name"] == "generate")


def root_span(docs):
    return next(s for s in spans_of(docs) if has(s, A.TRAJECTORY_ID))


#: (which span, key, the odd value as OTLP JSON writes it)
NAN = {"doubleValue": float("nan")}  # written as the JSON literal NaN
ODD = {
    "NaN engine timing": (generate_span, A.VLLM_TIME_IN_QUEUE, {"doubleValue": "NaN"}),
    "NaN engine timing, a JSON literal": (generate_span, A.VLLM_TIME_IN_DECODE, NAN),
    "infinite engine timing": (generate_span, A.VLLM_TIME_IN_PREFILL, {"doubleValue": "Inf"}),
    "engine timing past 2262": (generate_span, A.VLLM_TIME_IN_QUEUE, {"doubleValue": 1e300}),
    "negative engine timing": (generate_span, A.VLLM_TIME_IN_QUEUE, {"doubleValue": -1.0}),
    "infinite policy version": (root_span, A.POLICY_VERSION, {"doubleValue": "Infinity"}),
    "policy version past 64 bits": (root_span, A.POLICY_VERSION, {"intValue": "9" * 30}),
    "NaN reward": (root_span, A.REWARD, {"doubleValue": "NaN"}),
    "reward past a float": (root_span, A.REWARD, {"intValue": "9" * 400}),
    "reward as text": (root_span, A.REWARD, {"stringValue": "good"}),
    "env class as a number": (root_span, A.ENV_CLASS, {"intValue": "4"}),
    "env class as an array": (root_span, A.ENV_CLASS, {"arrayValue": {"values": []}}),
    "loop time past 2262": (root_span, A.LOOP_OWN_NS, {"intValue": str(2**64)}),
}


@pytest.mark.parametrize("case", list(ODD))
def test_an_odd_value_is_skipped_counted_and_the_rest_reported(run, capsys, case):
    path, docs = run
    which, key, value = ODD[case]
    set_attr(which(docs), key, value)
    rewrite(path, docs)
    out = report_json(path, capsys)
    assert out["trajectories"] == N
    assert out["losses"] == {LOSS_ODD_VALUE + key: 1}
    assert main(["report", str(path)]) == 0  # the tables too
    assert f"1 {LOSS_ODD_VALUE}{key}" in capsys.readouterr().out
    assert f"{ODD_VALUES} 1" in top_screen(path, capsys)


def test_one_nan_engine_timing_leaves_the_others_in_the_figures(run, capsys):
    path, docs = run
    clean = report_json(path, capsys)
    set_attr(generate_span(docs), A.VLLM_TIME_IN_QUEUE, {"doubleValue": "NaN"})
    rewrite(path, docs)
    odd = report_json(path, capsys)
    assert odd["trajectories"] == clean["trajectories"] == N
    mean = next(k for k in clean if "llm_queue" in k and k.endswith("_mean"))
    assert 0 < odd[mean] < clean[mean]  # one queue time the less, the others kept


def test_a_loss_record_with_keys_that_are_not_text_keeps_its_counts(run, capsys):
    path, docs = run
    lost = A.EXPORT_LOST_PREFIX
    docs.append({"resourceSpans": [{"resource": {"attributes": [
        {"key": 5, "value": {"intValue": "3"}},
        {"key": None, "value": {"intValue": "1"}},
        {"key": lost + "queue_full", "value": {"intValue": "7"}},
        {"key": lost + "export_failed", "value": {"intValue": "1e999"}},
        {"key": lost + "shutdown", "value": {"doubleValue": "Infinity"}},
    ]}}]})  # fmt: skip
    rewrite(path, docs)
    out = report_json(path, capsys)
    assert out["trajectories"] == N
    assert out["export_losses"] == {"queue_full": 7}
    assert out["losses"] == {
        LOSS_ODD_KEY: 2,
        LOSS_ODD_VALUE + lost + "export_failed": 1,
        LOSS_ODD_VALUE + lost + "shutdown": 1,
        "spans lost before the file: queue_full": 7,
    }
    screen = top_screen(path, capsys)
    assert "queue_full 7" in screen and f"{ODD_VALUES} 4" in screen


def test_a_root_ending_before_it_starts_is_reported_as_invalid(run, capsys):
    path, docs = run
    root = root_span(docs)
    root["endTimeUnixNano"] = str(int(root["startTimeUnixNano"]) - 1)
    rewrite(path, docs)
    out = report_json(path, capsys)
    assert out["trajectories"] == N - 1
    assert out["losses"] == {LOSS_INVERTED_ROOT: 1}
    assert "roots ending before they start 1" in top_screen(path, capsys)


def in_flight_record(docs, count, start):
    """An in-flight record (a log record) on the run's resource, one trajectory listed."""

    def arr(*values):
        return {"arrayValue": {"values": list(values)}}

    attrs = {
        "count": count, "env_classes": arr({"stringValue": "e"}),
        "env_counts": arr(count), "env_in_llm": arr({"intValue": "1"}),
        "trace_ids": arr({"stringValue": "ab" * 16}),
        "trajectory_ids": arr({"stringValue": "t9"}), "envs": arr({"stringValue": "e"}),
        "batch_ids": arr({"stringValue": "b"}), "start_ns": arr(start),
        "phases": arr({"stringValue": "llm"}), "phase_start_ns": arr(start),
    }  # fmt: skip
    at = root_span(docs)["startTimeUnixNano"]
    record = {"timeUnixNano": at, "eventName": "rollout.in_flight",
              "attributes": [{"key": f"rollout.in_flight.{k}", "value": v}
                             for k, v in attrs.items()]}  # fmt: skip
    resource = next(d for d in docs if "resourceSpans" in d)["resourceSpans"][0]["resource"]
    scope_logs = [{"scope": {"name": "otel_rollout.in_flight"}, "logRecords": [record]}]
    return {"resourceLogs": [{"resource": resource, "scopeLogs": scope_logs}]}


def test_an_in_flight_record_with_an_infinity_is_skipped_and_counted(run, capsys):
    path, docs = run
    docs.insert(0, in_flight_record(docs, {"intValue": "1"}, {"doubleValue": "Infinity"}))
    rewrite(path, docs)
    assert report_json(path, capsys)["trajectories"] == N
    assert f"{LOSS_ODD_IN_FLIGHT} 1" in top_screen(path, capsys)


def test_lone_surrogates_in_ids_and_env_classes_are_read_by_top_too(run, capsys):
    path, docs = run
    root = root_span(docs)
    set_attr(root, A.ENV_CLASS, {"stringValue": "env-\udcff"})
    set_attr(root, A.TRAJECTORY_ID, {"stringValue": "traj-\ud800"})
    rewrite(path, docs)
    out = report_json(path, capsys)
    assert out["trajectories"] == N and out["losses"] == {}
    screen = top_screen(path, capsys)
    assert "bad lines" not in screen and "not a trace file" not in screen
    assert f"done/running {N}/0" in screen


def test_a_deeply_nested_stray_file_beside_the_traces_does_not_stop_top(run, capsys):
    path, _ = run
    (path.parent / "stray.json").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (path.parent / "nested.jsonl").write_text('{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")
    screen = top_screen(path.parent, capsys)
    assert f"done/running {N}/0" in screen
    assert main(["report", str(path.parent), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trajectories"] == N


@pytest.mark.parametrize("args", [["--format", "json"], ["-v"]])
def test_a_closed_pipe_ends_the_report_quietly(run, args):
    path, _ = run
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line (``| head -0``)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "otel_rollout.cli", "report", str(path), *args],
            stdout=write, stderr=subprocess.PIPE, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.stderr == b""  # no traceback, nothing at exit either
    assert done.returncode == 141  # as the shell says of a process SIGPIPE ended


@pytest.fixture
def step_run(tmp_path, monkeypatch):
    clean_otel_env(monkeypatch)
    rollout = configure(local=True, output_dir=tmp_path, metrics_exporter="none",
                        service_name="odd", run_id="r1", summary_stream=None)  # fmt: skip
    tracer = rollout.tracer
    with tracer.step(3, trainer="ppo"), tracer.batch(1):
        _one_trajectory(tracer)
    assert rollout.shutdown()
    path = rollout.trace_file
    return path, [json.loads(line) for line in path.read_text().splitlines() if line]


def _one_trajectory(tracer):
    with tracer.trajectory("t", env="e") as t, t.generate():
        pass


SERIES = A.STEP_SERIES_PREFIX + A.SERIES_BUFFER_DEPTH


@pytest.mark.parametrize(("key", "value"), [
    (SERIES + ".offset_ns", {"intValue": "5"}),
    (SERIES + ".offset_ns", {"arrayValue": {"values": [{"doubleValue": "Infinity"}]}}),
    (SERIES + ".value", {"arrayValue": {"values": [{"doubleValue": "NaN"}]}}),
    (A.STEP_GPU_UTILIZATION, {"intValue": "9" * 400}),
    (A.STEP_GPU_UTILIZATION + ".train", {"doubleValue": "NaN"}),
    (A.ASYNC_PREFIX + "staleness", {"doubleValue": "Infinity"}),
])  # fmt: skip
def test_an_odd_sample_or_figure_on_a_step_span_is_skipped_and_counted(step_run, capsys, key,
                                                                       value):  # fmt: skip
    path, docs = step_run
    step = next(s for s in spans_of(docs) if has(s, A.STEP_WALL))
    set_attr(step, key, value)
    rewrite(path, docs)
    out = report_json(path, capsys)
    assert out["trajectories"] == 1 and out["losses"] == {LOSS_ODD_VALUE + key: 1}
    assert "NaN" not in json.dumps(out) and "Infinity" not in json.dumps(out)
    assert main(["report", str(path), "--output-dir", str(path.parent / "pictures")]) == 0
