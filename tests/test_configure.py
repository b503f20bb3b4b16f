"""configure(): settings precedence, the embedded trace file, OTLP to a real receiver."""

from __future__ import annotations

import io
import json
import warnings

import pytest
from opentelemetry import trace

from otel_rollout import ConfigError, configure
from otel_rollout.testing.receiver import OTLPReceiver

OTEL_VARS = [
    "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG", "OTEL_ROLLOUT_SAMPLE_RATIO", "OTEL_ROLLOUT_TRACES_EXPORTER",
    "OTEL_ROLLOUT_SERVICE_NAME", "OTEL_ROLLOUT_OUTPUT_DIR", "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_ROLLOUT_TAIL_KEEP_PERCENTILE", "OTEL_ROLLOUT_TAIL_KEEP_SLOWER_THAN_S",
]  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


def run(rollout, n=3):
    for i in range(n):
        with rollout.tracer.trajectory(f"t{i}", env="e") as traj:
            with traj.generate():
                pass
            with traj.env_step():
                pass


def test_embedded_default_writes_otlp_json_lines_and_prints_a_summary(tmp_path):
    out = io.StringIO()
    rollout = configure(local=True, output_dir=tmp_path, summary_stream=out)
    assert rollout.settings["traces_exporter"] == "file"
    run(rollout, 4)
    assert rollout.shutdown(timeout_s=10)
    lines = rollout.trace_file.read_text().splitlines()
    spans = [
        s
        for line in lines
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]
    assert (
        sorted(s["name"] for s in spans) == ["env_step"] * 4 + ["generate"] * 4 + ["trajectory"] * 4
    )
    assert "4 trajectories" in out.getvalue() and str(rollout.trace_file) in out.getvalue()
    assert rollout.trace_file.parent == tmp_path


def test_local_mode_leaves_the_global_providers_alone(tmp_path):
    before = trace.get_tracer_provider()
    rollout = configure(local=True, output_dir=tmp_path, summary_stream=io.StringIO())
    assert trace.get_tracer_provider() is before
    assert rollout.tracer_provider is not before
    rollout.shutdown()


def test_argument_beats_rollout_env_beats_otel_env_beats_default(monkeypatch, tmp_path):
    kw = {"local": True, "output_dir": tmp_path, "summary_stream": io.StringIO()}
    assert configure(**kw).settings["service_name"] == "otel-rollout"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-otel")
    assert configure(**kw).settings["service_name"] == "from-otel"
    monkeypatch.setenv("OTEL_ROLLOUT_SERVICE_NAME", "from-rollout")
    assert configure(**kw).settings["service_name"] == "from-rollout"
    assert configure(service_name="arg", **kw).settings["service_name"] == "arg"

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    assert configure(**kw).settings["sample_ratio"] == 0.25
    monkeypatch.setenv("OTEL_ROLLOUT_SAMPLE_RATIO", "0.5")
    assert configure(**kw).settings["sample_ratio"] == 0.5
    assert configure(sample_ratio=0.1, **kw).settings["sample_ratio"] == 0.1

    for name, var, env_value, arg in (
        ("tail_keep_percentile", "OTEL_ROLLOUT_TAIL_KEEP_PERCENTILE", "99", 95.0),
        ("tail_keep_slower_than_s", "OTEL_ROLLOUT_TAIL_KEEP_SLOWER_THAN_S", "600", 30.0),
    ):
        assert configure(**kw).settings[name] is None
        monkeypatch.setenv(var, env_value)
        assert configure(**kw).settings[name] == float(env_value)
        assert configure(**{name: arg}, **kw).settings[name] == arg

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert configure(**kw).settings["traces_exporter"] == "none"
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "")  # empty counts as unset
    assert configure(**kw).settings["traces_exporter"] == "file"


def test_bad_argument_raises_naming_value_and_choices(tmp_path):
    with pytest.raises(ConfigError, match=r"traces_exporter='jaeger'.*expected one of"):
        configure(local=True, traces_exporter="jaeger")
    with pytest.raises(ConfigError, match=r"sample_ratio=2"):
        configure(local=True, sample_ratio=2)
    with pytest.raises(ConfigError, match=r"protocol='udp'"):
        configure(local=True, protocol="udp")
    with pytest.raises(ConfigError, match=r"tail_keep_percentile=100.*\(0, 100\)"):
        configure(local=True, tail_keep_percentile=100)
    with pytest.raises(ConfigError, match=r"tail_keep_slower_than_s=-1.*seconds"):
        configure(local=True, tail_keep_slower_than_s=-1)


def test_bad_env_var_is_reported_not_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "statsd")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "lots")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_ROLLOUT_TAIL_KEEP_PERCENTILE", "p99")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = configure(local=True, output_dir=tmp_path, summary_stream=io.StringIO())
    text = " ".join(str(w.message) for w in caught)
    assert "OTEL_METRICS_EXPORTER='statsd'" in text and "OTEL_TRACES_SAMPLER_ARG='lots'" in text
    assert "OTEL_ROLLOUT_TAIL_KEEP_PERCENTILE='p99'" in text
    assert r.settings["metrics_exporter"] == "none" and r.settings["sample_ratio"] == 1.0
    assert r.settings["tail_keep_percentile"] is None


def test_sdk_disabled_gives_a_working_no_op_setup(monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    rollout = configure(local=True)
    run(rollout)
    assert rollout.collector.drain() == [] and rollout.shutdown()


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_endpoint_from_the_standard_env_var_exports_traces_and_metrics(monkeypatch, protocol):
    with OTLPReceiver() as rx:
        endpoint = rx.grpc_endpoint if protocol == "grpc" else rx.http_endpoint
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
        rollout = configure(local=True)
        assert rollout.settings["traces_exporter"] == rollout.settings["metrics_exporter"] == "otlp"
        run(rollout, 5)
        assert len(rollout.collector.drain()) == 5
        assert rollout.shutdown(timeout_s=10)
        roots = [s for s in rx.spans() if s.name == "trajectory"]
        assert len(roots) == 5 and roots[0].resource["service.name"] == "trainer"
        assert "rollout.run.id" in roots[0].resource
        (dur,) = rx.metric_points("rollout.trajectory.duration")
        assert dur["count"] == 5


def test_shutdown_returns_even_when_the_endpoint_is_down(monkeypatch):
    rx = OTLPReceiver()  # never started
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
    rollout = configure(local=True, endpoint=rx.grpc_endpoint)
    run(rollout, 10)
    assert len(rollout.collector.drain()) == 10
    rollout.shutdown(timeout_s=3)  # bounded by its timeout, whatever the exporter does


def test_global_configure_sets_providers_once_and_warns_on_a_second_call(tmp_path):
    import subprocess
    import sys

    code = """
import io, warnings
from opentelemetry import trace
import otel_rollout
r = otel_rollout.configure(output_dir=OUTDIR, summary_stream=io.StringIO())
assert trace.get_tracer_provider() is r.tracer_provider and r.is_global
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    again = otel_rollout.configure(service_name="other")
assert again is r and "already called" in str(caught[0].message)
with otel_rollout.trajectory("g") as t:
    pass
assert t.breakdown is not None and r.collector.drain()[0].trajectory_id == "g"
r.shutdown()
print("ok")
""".replace("OUTDIR", repr(str(tmp_path)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_sampled_file_keeps_every_failed_trajectory(tmp_path):
    rollout = configure(local=True, output_dir=tmp_path, sample_ratio=0.0,
                        summary_stream=io.StringIO())  # fmt: skip
    for i in range(20):
        try:
            with rollout.tracer.trajectory(f"t{i}") as traj, traj.env_step():
                if i % 5 == 0:
                    raise ValueError("bad action")
        except ValueError:
            pass
    rollout.shutdown(timeout_s=10)
    names = [
        s["attributes"]
        for line in rollout.trace_file.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
        if s["name"] == "trajectory"
    ]
    ids = sorted(a["value"]["stringValue"] for attrs in names for a in attrs
                 if a["key"] == "rollout.trajectory.id")  # fmt: skip
    assert ids == ["t0", "t10", "t15", "t5"]


def test_console_exporter_prints_each_trajectory_as_a_tree(monkeypatch, capsys):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("NO_COLOR", "1")
    rollout = configure(local=True)
    run(rollout, 2)
    rollout.shutdown(timeout_s=5)
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    lines = out.splitlines()
    roots = [i for i, line in enumerate(lines) if line.startswith("trajectory")]
    assert len(roots) == 2
    for i in roots:  # the root, its two phases indented under it, then the breakdown
        assert lines[i + 1].startswith("  generate") and lines[i + 2].startswith("  env_step")
        assert "breakdown" in lines[i + 3] and "llm" in lines[i + 3]


def test_each_process_has_its_own_instance_id_unless_the_user_sets_one(monkeypatch):
    def instance_id(**kw):
        r = configure(local=True, traces_exporter="none", **kw)
        return r.tracer_provider.resource.attributes["service.instance.id"]

    assert instance_id() != instance_id()  # unique: workers' cumulative series never collide
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=worker-3,team=rl")
    assert instance_id() == "worker-3"
    assert instance_id(resource_attributes={"service.instance.id": "w9"}) == "w9"


def test_prometheus_endpoint_serves_metrics_and_frees_its_port(monkeypatch):
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    first = configure(local=True, traces_exporter="none", metrics_exporter="prometheus")
    run(first, 3)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    (line,) = [
        x for x in body.splitlines() if x.startswith("rollout_trajectory_duration_seconds_count")
    ]
    assert line.endswith(" 3.0") and 'rollout_env_class="e"' in line
    with pytest.warns(UserWarning, match=rf"cannot serve Prometheus metrics on 127.0.0.1:{port}"):
        second = configure(local=True, traces_exporter="none", metrics_exporter="prometheus")
    run(second, 1)  # the port is taken: a warning, and the loop goes on
    assert first.shutdown(timeout_s=5) and second.shutdown(timeout_s=5)
    third = configure(local=True, traces_exporter="none", metrics_exporter="prometheus")
    run(third, 2)  # a process-wide registry would show 3 + 1 + 2 here
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    (line,) = [
        x for x in body.splitlines() if x.startswith("rollout_trajectory_duration_seconds_count")
    ]
    assert line.endswith(" 2.0")
    third.shutdown(timeout_s=5)


def test_unwritable_trace_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(
        ConfigError, match=r"cannot write trace files to .*a-file.*OTEL_ROLLOUT_OUTPUT_DIR"
    ):
        configure(local=True, output_dir=blocker / "traces")


def test_unparsable_endpoint_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=r"endpoint 'http://\[::1' is not accepted"):
        configure(local=True, endpoint="http://[::1", protocol="grpc")


def test_shutdown_twice_and_at_exit_flushes_what_nobody_shut_down(tmp_path):
    import subprocess
    import sys

    script = (
        "import otel_rollout\n"
        f"r = otel_rollout.configure(local=True, output_dir={str(tmp_path)!r})\n"
        "for i in range(4):\n"
        "    with r.tracer.trajectory(f't{i}', env='e') as t, t.generate():\n"
        "        pass\n"
        "if __import__('sys').argv[1] == 'twice':\n"
        "    with r:\n"  # a context manager: shutdown() on exit from the block
        "        assert r.shutdown(timeout_s=5)\n"
    )  # and otherwise exits without shutdown()
    for mode in ("exit", "twice"):
        done = subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "otel-rollout: 4 trajectories" in done.stderr  # the summary, printed once
        assert done.stderr.count("otel-rollout: 4 trajectories") == 1
        assert "shutdown can only be called once" not in done.stderr
    files = sorted(tmp_path.glob("traces-*.jsonl"))
    assert len(files) == 2
    for f in files:  # flushed at exit as well as by shutdown()
        roots = [
            s
            for line in f.read_text().splitlines()
            for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"]
            for s in ss["spans"]
            if s["name"] == "trajectory"
        ]
        assert len(roots) == 4
