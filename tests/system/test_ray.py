"""Ray integration against a real local Ray cluster and a real OTLP receiver.

Workers are configured by the string-form setup hook from ``otel_ray.runtime_env()``; their
spans and histograms go over OTLP gRPC to an ``OTLPReceiver`` started here, and their
breakdowns come back to the driver with the results and through the gatherer actor.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
import time

import pytest

import otel_rollout
from otel_rollout import attributes as A
from otel_rollout import summarize
from otel_rollout._settings.table import SETTINGS, resolve
from otel_rollout._setup import rollout as _rollout
from otel_rollout.instrumentation import ray_attributes
from otel_rollout.integrations import ray as otel_ray
from otel_rollout.testing import make_test_env
from otel_rollout.testing.receiver import OTLPReceiver, _attrs

ray = pytest.importorskip("ray")

N_TASKS, N_SYNC, N_ASYNC, N_STREAM = 4, 4, 2, 2
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(otel_rollout.__file__)))
N = N_TASKS + N_SYNC + N_ASYNC + N_STREAM

HOOK_MODULE = """
import os
from otel_rollout.integrations import ray as otel_ray

def hook():
    # Runs after otel-rollout's hook: the worker is configured by now.
    os.environ["USER_HOOK_RAN"] = "configured" if otel_ray.rollout() is not None else "no"
"""


# --- work run in the workers ---------------------------------------------------------------


def _run_sync(tid: str) -> None:
    with otel_rollout.trajectory(tid, env="ray-test", model="m") as t:
        with t.env_setup():
            time.sleep(0.002)
        with t.generate() as g:
            time.sleep(0.01)
            g.record(input_tokens=3, output_tokens=5)
        with t.env_step():
            time.sleep(0.004)


async def _run_async(tid: str) -> None:
    async with otel_rollout.trajectory(tid, env="ray-test", model="m") as t:
        async with t.generate():
            await asyncio.sleep(0.01)
        async with t.env_step():
            await asyncio.sleep(0.004)


@ray.remote
@otel_ray.traced
def rollout_task(tid: str) -> list:
    _run_sync(tid)
    return otel_ray.drain()


@ray.remote
def probe() -> dict:
    handle = otel_ray.rollout()
    return {
        "configured": handle is not None and handle.is_global,
        "user_var": os.environ.get("USER_VAR"),
        "user_hook": os.environ.get("USER_HOOK_RAN"),
        "resource": ray_attributes(),
        "provider_resource": dict(handle.tracer_provider.resource.attributes) if handle else {},
    }


@ray.remote(num_cpus=0)
class Roller:
    @otel_ray.traced
    def run(self, tid: str) -> list:
        _run_sync(tid)
        return otel_ray.drain()

    @otel_ray.traced(gather=True)
    async def run_many(self, tids: list[str]) -> list[str]:
        await asyncio.gather(*(_run_async(t) for t in tids))
        return tids

    @otel_ray.traced(gather=True)
    async def stream(self, tids: list[str]):
        for tid in tids:
            await _run_async(tid)
            yield tid

    def where(self) -> dict:
        return ray_attributes()


@ray.remote(num_cpus=0)
class Quiet:
    """No flush per call and exports far apart: only the exit handler delivers its data."""

    @otel_ray.traced(flush=False)
    def run(self, tid: str) -> int:
        _run_sync(tid)
        return os.getpid()

    def held(self) -> dict[str, int]:
        """What this worker's pipeline holds: exported and still pending spans."""
        stats = otel_rollout.get_rollout().export_stats
        return {"exported": stats.exported, "pending": stats.pending}


# --- the cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    hook_dir = tmp_path_factory.mktemp("hook")
    (hook_dir / "user_hook_mod.py").write_text(HOOK_MODULE)
    rx = OTLPReceiver().start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.grpc_endpoint)
        mp.setattr(_rollout, "_global", None)  # whatever another test configured globally
        base = {
            # workers import this checkout's otel_rollout, as the driver does
            "env_vars": {
                "PYTHONPATH": os.pathsep.join((str(hook_dir), _CHECKOUT)),
                "USER_VAR": "kept",
            },
            "worker_process_setup_hook": "user_hook_mod.hook",
        }
        env = otel_ray.runtime_env(
            base, metric_export_interval_ms=250, service_name="ray-test-worker", run_id="run-7"
        )
        driver = otel_rollout.configure(local=True, service_name="ray-test-driver")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=env, log_to_driver=False)
    try:
        yield {"rx": rx, "driver": driver, "env": env, "base": base}
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        driver.shutdown(timeout_s=2)
        rx.stop()


def _exports_per_resource(rx: OTLPReceiver) -> dict[tuple, int]:
    """How many metric exports each resource (process) has sent."""
    out: dict[tuple, int] = {}
    for req in rx.metric_requests():
        for rm in req.resource_metrics:
            res = tuple(sorted(_attrs(rm.resource.attributes).items()))
            out[res] = out.get(res, 0) + 1
    return out


def _latest_histogram_counts(rx: OTLPReceiver, name: str) -> dict[tuple, int]:
    """Count of the latest cumulative point per (resource, attribute set)."""
    requests = rx.metric_requests()
    latest: dict[tuple, tuple[int, int]] = {}
    for req in requests:
        for rm in req.resource_metrics:
            res = tuple(sorted(_attrs(rm.resource.attributes).items()))
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name != name or m.WhichOneof("data") != "histogram":
                        continue
                    assert m.histogram.aggregation_temporality == 2  # cumulative
                    for p in m.histogram.data_points:
                        key = (res, tuple(sorted(_attrs(p.attributes).items())))
                        if key not in latest or p.time_unix_nano >= latest[key][0]:
                            latest[key] = (p.time_unix_nano, p.count)
    return {k: count for k, (_, count) in latest.items()}


# --- tests without a cluster ---------------------------------------------------------------


def test_resource_attributes_outside_ray():
    code = (
        "import sys\n"
        "import otel_rollout.integrations.ray\n"
        "from otel_rollout.instrumentation import ray_attributes\n"
        "print(ray_attributes(), 'ray' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["{}", "False"]  # lazy: importing the integration skips Ray
    if not ray.is_initialized():
        assert ray_attributes() == {}  # imported, not initialised


def test_breakdown_pickles():
    env = make_test_env()
    with env.tracer.trajectory("t-1", env="e", model="m") as t, t.generate():
        pass
    (b,) = env.collector.drain()
    copy = pickle.loads(pickle.dumps(b))
    assert copy == b and copy.nanos == b.nanos and copy.attributes["rollout.env.class"] == "e"
    with pytest.raises(TypeError):
        copy.nanos["e2e"] = 0  # still read-only after the trip


def test_runtime_env_merges_without_clobbering(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-driver-env")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://old:4317")
    monkeypatch.setattr(_rollout, "_global", None)
    base = {"pip": ["x"], "env_vars": {"A": "1", "OTEL_SERVICE_NAME": "from-base"}}
    env = otel_ray.runtime_env(base, endpoint="http://new:4317", sample_ratio=0.5,
                               resource_attributes={"team": "rl infra"})  # fmt: skip
    assert base == {"pip": ["x"], "env_vars": {"A": "1", "OTEL_SERVICE_NAME": "from-base"}}
    assert env["pip"] == ["x"]
    assert env["worker_process_setup_hook"] == otel_ray.SETUP_HOOK
    v = env["env_vars"]
    assert v["A"] == "1" and v["OTEL_SERVICE_NAME"] == "from-base"
    assert v["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://new:4317"
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" not in v  # replaced by the explicit endpoint
    assert v["OTEL_ROLLOUT_SAMPLE_RATIO"] == "0.5"
    assert v["OTEL_RESOURCE_ATTRIBUTES"] == "team=rl%20infra"
    with pytest.raises(TypeError, match="unknown settings"):
        otel_ray.runtime_env(endpiont="x")

    # A user's callable hook is chained; a string one rides in an env var (JSON-safe).
    def mine() -> None:
        pass

    chained = otel_ray.runtime_env({"worker_process_setup_hook": mine})
    assert callable(chained["worker_process_setup_hook"])
    s = otel_ray.runtime_env({"worker_process_setup_hook": "pkg.hook"})
    assert s["worker_process_setup_hook"] == otel_ray.SETUP_HOOK
    assert s["env_vars"][otel_ray.NEXT_HOOK_ENV] == "pkg.hook"


def test_runtime_env_carries_the_drivers_resolved_settings(monkeypatch, tmp_path):
    handle = otel_rollout.configure(local=True, service_name="drv", traces_exporter="file",
                                    output_dir=tmp_path, sample_ratio=0.25)  # fmt: skip
    try:
        monkeypatch.setattr(_rollout, "_global", handle)
        v = otel_ray.runtime_env()["env_vars"]
        assert v["OTEL_ROLLOUT_SERVICE_NAME"] == "drv"
        assert v["OTEL_ROLLOUT_RUN_ID"] == handle.settings.run_id
        assert v["OTEL_ROLLOUT_TRACES_EXPORTER"] == "file"
        assert v["OTEL_ROLLOUT_SAMPLE_RATIO"] == "0.25"
        assert v["OTEL_ROLLOUT_OUTPUT_DIR"] == str(tmp_path.resolve())
    finally:
        handle.shutdown(timeout_s=1)


def test_runtime_env_takes_every_setting_of_the_table(monkeypatch):
    monkeypatch.setattr(_rollout, "_global", None)
    v = otel_ray.runtime_env(tail_keep_percentile=99, bands={"judge": "llm"},
                             metric_export_interval_ms=250, disabled=False)["env_vars"]  # fmt: skip
    assert v["OTEL_ROLLOUT_TAIL_KEEP_PERCENTILE"] == "99"
    assert v["OTEL_ROLLOUT_BANDS"] == "judge=llm"
    assert v["OTEL_METRIC_EXPORT_INTERVAL"] == "250" and v["OTEL_ROLLOUT_DISABLED"] == "false"
    assert set(otel_ray.SETTING_VARS) == {s.name for s in SETTINGS}
    with pytest.raises(otel_rollout.ConfigError, match=r"tail_keep_percentile=100"):
        otel_ray.runtime_env(tail_keep_percentile=100)  # an argument: fatal, as in configure()


def test_a_worker_resolves_every_setting_the_driver_resolved(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "700")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4096")
    handle = otel_rollout.configure(
        local=True, service_name="drv", run_id="grpo/run 7", traces_exporter="none",
        metrics_exporter="none", sample_ratio=0.25, tail_keep_slower_than_s=30,
        tail_keep_percentile=99, bands={"judge": "llm"}, output_dir=tmp_path,
        metric_export_interval_ms=1500, resource_attributes={"team": "rl infra"},
    )  # fmt: skip
    try:
        monkeypatch.setattr(_rollout, "_global", handle)
        env_vars = otel_ray.runtime_env()["env_vars"]
    finally:
        handle.shutdown(timeout_s=1)
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(name)  # a worker sees only what runtime_env gives it
    for name, value in env_vars.items():
        monkeypatch.setenv(name, value)
    worker = resolve()
    driver = handle.settings
    for s in SETTINGS:
        if s.forward and s.name not in ("resource_attributes",):
            assert getattr(worker, s.name) == getattr(driver, s.name), s.name
    assert worker.resource_attributes == {"team": "rl infra"}
    assert worker.endpoint_for("traces") == "http://collector:4318/v1/traces"


def test_no_carrier_while_instrumentation_is_suppressed():
    from opentelemetry import context as otel_context

    env = make_test_env()
    with env.tracer_provider.get_tracer("t").start_as_current_span("batch"):
        assert "traceparent" in otel_ray.carrier()
        key = otel_context._SUPPRESS_INSTRUMENTATION_KEY
        token = otel_context.attach(otel_context.set_value(key, True))
        try:
            assert otel_ray.carrier() == {}
        finally:
            otel_context.detach(token)


async def test_traced_parents_every_kind_of_callable_to_the_callers_span():
    env = make_test_env()
    with env.tracer_provider.get_tracer("t").start_as_current_span("batch") as batch:
        c = otel_ray.carrier()

    @otel_ray.traced(flush=False)
    def f(tid):
        with env.tracer.trajectory(tid) as t, t.generate():
            pass

    @otel_ray.traced(flush=False)
    async def g(tid):
        async with env.tracer.trajectory(tid) as t, t.generate():
            pass

    @otel_ray.traced(flush=False)
    def gen(tid):
        with env.tracer.trajectory(tid) as t:
            for _ in range(2):
                with t.generate():
                    pass
                yield 1

    @otel_ray.traced(flush=False)
    async def agen(tid):
        async with env.tracer.trajectory(tid) as t:
            for _ in range(2):
                async with t.generate():
                    pass
                yield 1

    f("f", otel_carrier=c)
    await g("g", otel_carrier=c)
    assert list(gen("gen", otel_carrier=c)) == [1, 1]
    assert [x async for x in agen("agen", otel_carrier=c)] == [1, 1]
    with otel_ray.attached(c):
        f("nested")
    f("orphan")
    roots = {r.attributes[A.TRAJECTORY_ID]: r for r in env.roots()}
    batch_id = batch.get_span_context().span_id
    for tid in ("f", "g", "gen", "agen", "nested"):
        assert roots[tid].parent.span_id == batch_id, tid
        kids = env.children(roots[tid])
        assert kids and all(k.context.trace_id == roots[tid].context.trace_id for k in kids)
    assert roots["orphan"].parent is None


def test_a_failed_push_keeps_the_breakdowns(monkeypatch, caplog):
    handle = otel_rollout.configure(local=True, traces_exporter="none", metrics_exporter="none")
    monkeypatch.setattr(_rollout, "_global", handle)

    @otel_ray.traced(gather="no-such-gatherer", flush=False)
    def work():
        with handle.tracer.trajectory("kept") as t, t.generate():
            pass
        return 7

    was_up = ray.is_initialized()
    assert work() == 7  # no gatherer: the push fails, the call does not
    assert ray.is_initialized() == was_up  # and no local cluster was started for it
    assert [b.trajectory_id for b in otel_ray.drain()] == ["kept"]
    assert "could not push 1 breakdowns" in caplog.text
    handle.shutdown(timeout_s=1)


# --- tests on the cluster ------------------------------------------------------------------


def test_string_hook_configures_workers_and_keeps_the_users_env(cluster):
    hook = cluster["env"]["worker_process_setup_hook"]
    assert hook == "otel_rollout.integrations.ray.setup_worker"
    json.dumps(cluster["env"])  # what the Job Submission API accepts
    got = ray.get(probe.remote())
    assert got["configured"]
    assert got["user_var"] == "kept"
    assert got["user_hook"] == "configured"  # the user's own hook ran, after ours
    node = ray.get_runtime_context().get_node_id()
    assert got["resource"]["ray.node.id"] == node
    assert got["resource"]["ray.job.id"] == ray.get_runtime_context().get_job_id()
    res = got["provider_resource"]
    assert res["ray.node.id"] == node and res["ray.worker.id"] == got["resource"]["ray.worker.id"]
    assert res["service.name"] == "ray-test-worker" and res["rollout.run.id"] == "run-7"
    assert res["service.instance.id"] == res["ray.worker.id"]


def test_trajectories_in_tasks_and_actors_nest_under_the_drivers_batch(cluster):
    rx, driver = cluster["rx"], cluster["driver"]
    gatherer = otel_ray.gatherer()
    roller = Roller.remote()
    tracer = driver.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("rollout.batch") as batch:
        c = otel_ray.carrier()
        task_refs = [rollout_task.remote(f"task-{i}", otel_carrier=c) for i in range(N_TASKS)]
        sync_refs = [roller.run.remote(f"sync-{i}", otel_carrier=c) for i in range(N_SYNC)]
        many = roller.run_many.remote([f"async-{i}" for i in range(N_ASYNC)], otel_carrier=c)
        stream = roller.stream.remote([f"stream-{i}" for i in range(N_STREAM)], otel_carrier=c)
        returned = [b for bds in ray.get(task_refs + sync_refs) for b in bds]
        assert ray.get(many) == [f"async-{i}" for i in range(N_ASYNC)]
        assert [ray.get(ref) for ref in stream] == [f"stream-{i}" for i in range(N_STREAM)]
    expected = (
        {f"task-{i}" for i in range(N_TASKS)}
        | {f"sync-{i}" for i in range(N_SYNC)}
        | {f"async-{i}" for i in range(N_ASYNC)}
        | {f"stream-{i}" for i in range(N_STREAM)}
    )

    # Breakdowns: returned with results (a) plus pushed to the gatherer (b), each once.
    gathered = otel_ray.drain_gathered(gatherer)
    breakdowns = returned + gathered
    ids = [b.trajectory_id for b in breakdowns]
    assert len(ids) == N and set(ids) == expected
    assert {b.trace_id for b in breakdowns} == {format(batch.get_span_context().trace_id, "032x")}
    summary = summarize(breakdowns)
    assert summary["generate/trajectory_time_llm_mean"] > 0
    assert summary["generate/trajectory_time_completion_max"] >= max(b.e2e for b in breakdowns)
    assert 0 < summary["generate/frac_time_in_env"] < 1
    assert otel_ray.drain_gathered(gatherer) == []

    # Spans: every trajectory once, its root a child of the driver's batch span.
    def roots(r):
        return [s for s in r.spans() if s.name == A.SPAN_TRAJECTORY]

    assert rx.wait_for(lambda r: len(roots(r)) >= N, timeout=20)
    got = roots(rx)
    assert sorted(s.attributes[A.TRAJECTORY_ID] for s in got) == sorted(expected)
    batch_ctx = batch.get_span_context()
    for s in got:
        assert s.trace_id == format(batch_ctx.trace_id, "032x")
        assert s.parent_span_id == format(batch_ctx.span_id, "016x")
        assert s.resource["service.name"] == "ray-test-worker" and "ray.worker.id" in s.resource
    generates = [s for s in rx.spans() if s.name == A.SPAN_GENERATE]
    assert {g.parent_span_id for g in generates} >= {s.span_id for s in got}
    assert len({s.resource["ray.worker.id"] for s in got}) >= 2  # tasks and the actor

    # Histograms: the latest cumulative count of every worker sums to N.
    def total(r):
        return sum(_latest_histogram_counts(r, A.METRIC_DURATION).values())

    assert rx.wait_for(lambda r: total(r) >= N, timeout=20)
    # Two more exports from every worker that reported: nothing is counted twice.
    workers = {res for res, _ in _latest_histogram_counts(rx, A.METRIC_DURATION)}
    seen = {k: n for k, n in _exports_per_resource(rx).items() if k in workers}
    assert rx.wait_for(
        lambda r: all(_exports_per_resource(r).get(k, 0) >= n + 2 for k, n in seen.items()),
        timeout=20,
    )
    counts = _latest_histogram_counts(rx, A.METRIC_DURATION)
    assert sum(counts.values()) == N
    assert len({res for res, _ in counts}) >= 2
    assert ray.get(roller.where.remote())["ray.actor.id"] == roller._actor_id.hex()


def test_exit_handler_flushes_a_worker_that_ray_ends(cluster):
    rx = cluster["rx"]
    slow = {"OTEL_METRIC_EXPORT_INTERVAL": "600000", "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    quiet = Quiet.options(runtime_env={"env_vars": slow}).remote()
    pid = ray.get(quiet.run.remote("quiet-0"))

    def mine(r):
        return [s for s in r.spans() if s.attributes.get(A.TRAJECTORY_ID) == "quiet-0"]

    def counts(r):
        c = _latest_histogram_counts(r, A.METRIC_DURATION)
        return [n for (res, _), n in c.items() if ("process.pid", pid) in res]

    held = ray.get(quiet.held.remote())
    assert held["exported"] == 0 and held["pending"] > 0  # the worker holds it, unsent
    assert not mine(rx) and not counts(rx)
    quiet.__ray_terminate__.remote()  # a graceful end, as when Ray reaps an idle worker
    assert rx.wait_for(lambda r: mine(r) and counts(r), timeout=20)
    assert counts(rx) == [1]


def test_a_batch_fanned_out_over_workers_gives_linked_roots_and_the_same_figures(cluster):
    rx, driver = cluster["rx"], cluster["driver"]
    roller = Roller.remote()
    with driver.tracer.batch(step=5) as batch:
        c = otel_ray.carrier()
        refs = [rollout_task.remote(f"linked-{i}", otel_carrier=c) for i in range(N_TASKS)]
        refs += [roller.run.remote(f"linked-a{i}", otel_carrier=c) for i in range(N_SYNC)]
        gathered = [b for bds in ray.get(refs) for b in bds]
        batch.add(gathered)  # breakdowns come back from the workers to the driver's batch
    n = N_TASKS + N_SYNC
    assert len(gathered) == n and {b.batch_id for b in gathered} == {batch.batch_id}
    assert batch.analysis.trajectories == n
    start = batch.span.start_time
    assert batch.analysis == otel_rollout.analyze_batch(gathered, start_ns=start)
    assert batch.analysis.wall_ns == max(b.end_time_ns for b in gathered) - start

    # every worker trajectory is the root of its own trace, linked to the batch span
    def linked(r):
        return [s for s in r.spans() if s.attributes.get(A.BATCH_ID) == batch.batch_id
                and A.TRAJECTORY_ID in s.attributes]  # fmt: skip

    assert rx.wait_for(lambda r: len(linked(r)) >= n, timeout=20)
    ctx = batch.span.get_span_context()
    roots = linked(rx)
    assert len({s.trace_id for s in roots}) == n
    for s in roots:
        assert s.parent_span_id is None and s.trace_id != format(ctx.trace_id, "032x")
        assert s.attributes[A.STEP] == 5
        assert s.links == ((format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"),
                            {A.BATCH_ID: batch.batch_id}),)  # fmt: skip
        assert s.resource["service.name"] == "ray-test-worker"
