"""configure(): settings precedence, the embedded trace file, OTLP to a real receiver."""

from __future__ import annotations

import inspect
import io
import json
import re
import warnings
from pathlib import Path

import pytest
from opentelemetry import trace

from otel_rollout import ConfigError, configure
from otel_rollout._settings.table import (
    SETTINGS,
    documented_table,
    markdown_table,
    resolve,
    safe_file_part,
)
from otel_rollout.testing.receiver import OTLPReceiver

OTEL_VARS = [
    "OTEL_ROLLOUT_DISABLED", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_EXPORTER_PROMETHEUS_PORT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_ROLLOUT_RUN_ID",
    "OTEL_ROLLOUT_BANDS", "OTEL_ROLLOUT_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_TIMEOUT",
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
    assert rollout.settings.traces_exporter == "file"
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


class _Writes(io.StringIO):
    """A stream that keeps each write() call apart."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def write(self, text):
        self.calls.append(text)
        return super().write(text)


def test_the_summary_is_one_write_so_workers_sharing_stderr_do_not_interleave(tmp_path):
    out = _Writes()
    rollout = configure(local=True, output_dir=tmp_path, summary_stream=out)
    run(rollout, 3)
    assert rollout.shutdown(timeout_s=10)
    [whole] = out.calls
    assert whole.startswith("otel-rollout: 3 trajectories\n") and whole.endswith("\n")
    assert f"  traces: {rollout.trace_file}\n" in whole


def test_a_closed_summary_stream_does_not_break_shutdown(tmp_path):
    out = io.StringIO()
    rollout = configure(local=True, output_dir=tmp_path, summary_stream=out)
    run(rollout, 2)
    out.close()  # e.g. stderr piped into `head`, gone before the run ended
    assert rollout.shutdown(timeout_s=10)
    assert len(rollout.trace_file.read_text().splitlines()) >= 1


def test_local_mode_leaves_the_global_providers_alone(tmp_path):
    before = trace.get_tracer_provider()
    rollout = configure(local=True, output_dir=tmp_path, summary_stream=io.StringIO())
    assert trace.get_tracer_provider() is before
    assert rollout.tracer_provider is not before
    assert rollout.shutdown()


def test_argument_beats_rollout_env_beats_otel_env_beats_default(monkeypatch, tmp_path):
    kw = {"local": True, "output_dir": tmp_path, "summary_stream": io.StringIO()}
    assert configure(**kw).settings.service_name == "otel-rollout"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-otel")
    assert configure(**kw).settings.service_name == "from-otel"
    monkeypatch.setenv("OTEL_ROLLOUT_SERVICE_NAME", "from-rollout")
    assert configure(**kw).settings.service_name == "from-rollout"
    assert configure(service_name="arg", **kw).settings.service_name == "arg"

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    assert configure(**kw).settings.sample_ratio == 0.25
    monkeypatch.setenv("OTEL_ROLLOUT_SAMPLE_RATIO", "0.5")
    assert configure(**kw).settings.sample_ratio == 0.5
    assert configure(sample_ratio=0.1, **kw).settings.sample_ratio == 0.1

    for name, var, env_value, arg in (
        ("tail_keep_percentile", "OTEL_ROLLOUT_TAIL_KEEP_PERCENTILE", "99", 95.0),
        ("tail_keep_slower_than_s", "OTEL_ROLLOUT_TAIL_KEEP_SLOWER_THAN_S", "600", 30.0),
    ):
        assert getattr(configure(**kw).settings, name) is None
        monkeypatch.setenv(var, env_value)
        assert getattr(configure(**kw).settings, name) == float(env_value)
        assert getattr(configure(**{name: arg}, **kw).settings, name) == arg

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert configure(**kw).settings.traces_exporter == "none"
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "")  # empty counts as unset
    assert configure(**kw).settings.traces_exporter == "file"


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
    assert r.settings.metrics_exporter == "none" and r.settings.sample_ratio == 1.0
    assert r.settings.tail_keep_percentile is None


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
        assert rollout.settings.traces_exporter == rollout.settings.metrics_exporter == "otlp"
        run(rollout, 5)
        assert len(rollout.collector.drain()) == 5
        assert rollout.shutdown(timeout_s=10)
        roots = [s for s in rx.spans() if s.name == "trajectory"]
        assert len(roots) == 5 and roots[0].resource["service.name"] == "trainer"
        assert "rollout.run.id" in roots[0].resource
        (dur,) = rx.metric_points("rollout.trajectory.duration")
        assert dur["count"] == 5


def test_shutdown_returns_even_when_the_endpoint_is_down(monkeypatch, tmp_path):
    rx = OTLPReceiver()  # never started
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
    rollout = configure(local=True, endpoint=rx.grpc_endpoint, output_dir=tmp_path)
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
assert otel_rollout.get_rollout() is r
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


# --- the settings table ---------------------------------------------------------------------


def test_docs_show_the_settings_table_as_declared():
    root = Path(__file__).resolve().parents[2]
    for name in ("docs/configure.md",):  # the README links to it
        text = (root / name).read_text()
        assert documented_table(text) == markdown_table(), (
            f"{name} is out of date: run python scripts/settings_table.py"
        )


def test_every_argument_setting_is_a_configure_keyword_and_resolves_from_it(tmp_path):
    params = inspect.signature(configure).parameters
    values = {"service_name": "svc", "run_id": "r-1", "traces_exporter": "none",
              "metrics_exporter": "none", "endpoint": "http://127.0.0.1:1", "protocol": "grpc",
              "sample_ratio": 0.5, "tail_keep_slower_than_s": 3.0, "tail_keep_percentile": 90.0,
              "output_dir": tmp_path, "metric_export_interval_ms": 1000,
              "trace_file_max_mb": 16.0, "trace_file_max_age_s": 600.0,
              "resource_attributes": {"team": "rl"}, "bands": {"judge": "llm"},
              "genai_metrics": True, "loop_stalls": False}  # fmt: skip
    arguments = [s.name for s in SETTINGS if s.argument]
    assert sorted(arguments) == sorted(values)
    for name in arguments:
        assert name in params, f"configure() has no {name}= keyword"
    r = configure(local=True, **values)
    for name, value in values.items():
        assert r.settings.sources[name] == "argument", name
        got = getattr(r.settings, name)
        assert (dict(got) if isinstance(value, dict) else got) == value, name
    r.shutdown(timeout_s=2)


@pytest.mark.parametrize("text", ["1", "true", "TRUE", "yes", "On"])
def test_a_boolean_variable_accepts_the_usual_spellings_of_true(monkeypatch, text):
    monkeypatch.setenv("OTEL_ROLLOUT_DISABLED", text)
    r = configure(local=True)
    assert r.settings.disabled and r.processor is None
    run(r)
    assert r.collector.drain() == [] and r.shutdown()


@pytest.mark.parametrize("text", ["0", "false", "No", "OFF"])
def test_a_boolean_variable_accepts_the_usual_spellings_of_false(monkeypatch, text, tmp_path):
    monkeypatch.setenv("OTEL_SDK_DISABLED", text)
    r = configure(local=True, traces_exporter="none")
    assert not r.settings.disabled
    run(r, 2)
    assert len(r.collector.drain()) == 2 and r.shutdown()


def test_only_a_traces_endpoint_sends_traces_there_and_no_metrics_anywhere(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/custom")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    s = resolve()
    assert s.traces_exporter == "otlp" and s.metrics_exporter == "none"
    assert s.endpoint_for("traces") == "http://collector:4318/custom"  # as given
    assert s.traces_protocol == "http/protobuf" and s.metrics_protocol == "grpc"


def test_only_a_metrics_endpoint_sends_metrics_there_and_traces_to_the_file(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://collector:4317")
    s = resolve()
    assert s.metrics_exporter == "otlp" and s.traces_exporter == "file"
    assert s.endpoint_for("metrics") == "http://collector:4317"


def test_the_base_endpoint_gets_each_signals_path_over_http(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics:9090/otlp")
    s = resolve()
    assert s.endpoint_for("traces") == "http://collector:4318/v1/traces"
    assert s.endpoint_for("metrics") == "http://metrics:9090/otlp"  # per-signal wins, as is
    # the argument is the base of both and beats every variable, per-signal ones included
    s = resolve(endpoint="http://arg:4318", protocol="http/protobuf")
    assert s.endpoint_for("metrics") == "http://arg:4318/v1/metrics"
    assert resolve(protocol="grpc").endpoint_for("traces") == "http://collector:4318/"


def test_metrics_only_endpoint_exports_metrics_to_a_real_receiver(monkeypatch, tmp_path):
    with OTLPReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", rx.http_endpoint + "/v1/metrics")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
        r = configure(local=True, output_dir=tmp_path, summary_stream=io.StringIO())
        run(r, 3)
        assert r.shutdown(timeout_s=10)
        (dur,) = rx.metric_points("rollout.trajectory.duration")
        assert dur["count"] == 3
        assert rx.spans() == [] and r.trace_file is not None


# --- a bad variable warns, a bad argument is fatal ----------------------------------------


@pytest.mark.parametrize(
    ("var", "text", "name", "default"),
    [
        ("OTEL_ROLLOUT_TAIL_KEEP_SLOWER_THAN_S", "inf", "tail_keep_slower_than_s", None),
        ("OTEL_ROLLOUT_TAIL_KEEP_SLOWER_THAN_S", "nan", "tail_keep_slower_than_s", None),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0", "metric_export_interval_ms", 60000),
        ("OTEL_METRIC_EXPORT_INTERVAL", "-5", "metric_export_interval_ms", 60000),
        ("OTEL_EXPORTER_PROMETHEUS_PORT", "99999", "prometheus_port", 9464),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "bsp_max_queue_size", 2048),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "-1", "bsp_max_queue_size", 2048),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "otlp_timeout_ms", 5000),
        ("OTEL_ROLLOUT_BANDS", "judge=lm", "bands", None),
        ("OTEL_ROLLOUT_DISABLED", "maybe", "disabled", False),
    ],
)
def test_a_bad_variable_warns_naming_it_and_the_job_goes_on(monkeypatch, tmp_path, var, text,
                                                            name, default):  # fmt: skip
    monkeypatch.setenv(var, text)
    with pytest.warns(UserWarning, match=re.escape(f"{var}={text!r} is not accepted")):
        r = configure(local=True, output_dir=tmp_path, summary_stream=io.StringIO(),
                      sample_ratio=0.5)  # fmt: skip
    assert getattr(r.settings, name) == default and r.settings.sources[name] == "default"
    run(r, 3)
    assert len(r.collector.drain()) == 3 and r.shutdown(timeout_s=5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tail_keep_slower_than_s": float("inf")}, r"tail_keep_slower_than_s=inf"),
        ({"metric_export_interval_ms": 0}, r"metric_export_interval_ms=0 .*integer > 0"),
        ({"metric_export_interval_ms": -5}, r"metric_export_interval_ms=-5"),
        ({"run_id": ""}, r"run_id='' .*non-empty"),
        ({"bands": {"judge": "lm"}}, r"bands=\{'judge': 'lm'\} .*band one of llm"),
        ({"service_name": 7}, r"service_name=7"),
    ],
)
def test_a_bad_argument_is_a_config_error_before_anything_starts(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        configure(local=True, traces_exporter="none", **kwargs)


@pytest.mark.parametrize("run_id", ["grpo/qwen3-8b/lr=1e-6", "x" * 240, "../../etc"])
def test_any_run_id_is_used_as_given_and_made_safe_for_the_file_name(monkeypatch, tmp_path,
                                                                     run_id):  # fmt: skip
    monkeypatch.setenv("OTEL_ROLLOUT_RUN_ID", run_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = configure(local=True, output_dir=tmp_path, summary_stream=io.StringIO())
    assert r.tracer_provider.resource.attributes["rollout.run.id"] == run_id
    assert r.trace_file.parent == tmp_path and r.trace_file.exists()
    assert len(r.trace_file.name) < 100 and "/" not in r.trace_file.name[len("traces-") :]
    run(r, 2)
    assert r.shutdown(timeout_s=5)
    text = r.trace_file.read_text()
    assert text.count('"name":"trajectory"') + text.count('"name": "trajectory"') == 2


def test_two_long_run_ids_give_two_file_names():
    a, b = "x" * 200 + "a", "x" * 200 + "b"
    assert safe_file_part(a) != safe_file_part(b) and len(safe_file_part(a)) <= 64


def test_service_name_from_resource_attributes_unless_a_service_name_is_set(monkeypatch):
    def service(**kw):
        r = configure(local=True, traces_exporter="none", **kw)
        return r.tracer_provider.resource.attributes["service.name"]

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,host.name=h1")
    assert service() == "from-attrs"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-var")  # the spec: this one wins
    assert service() == "from-var"
    r = configure(local=True, traces_exporter="none", resource_attributes={"team": "rl"})
    attrs = r.tracer_provider.resource.attributes
    assert attrs["host.name"] == "h1" and attrs["team"] == "rl"  # merged, the user's wins


def test_the_core_imports_no_integration():
    import subprocess
    import sys

    code = (
        "import sys, otel_rollout, otel_rollout._setup.config\n"
        "print(sorted(m for m in sys.modules if m.startswith('otel_rollout.integrations')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_handles_shut_down_or_dropped_are_not_kept_until_exit():
    import gc
    import weakref

    refs = []
    for _ in range(5):
        r = configure(local=True, traces_exporter="none")
        run(r, 1)
        assert r.shutdown(timeout_s=2)
        refs.append(weakref.ref(r))
    for _ in range(5):  # never shut down, and dropped
        refs.append(weakref.ref(configure(local=True, traces_exporter="none")))
    del r
    gc.collect()
    assert [ref() for ref in refs] == [None] * 10


def test_the_resource_holds_no_other_setting(monkeypatch):
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    r = configure(local=True, traces_exporter="none", run_id="r1")
    attrs = r.tracer_provider.resource.attributes
    assert r.settings.resource_attributes == {}
    assert not {"disabled", "service_name", "run_id"} & set(attrs)
    assert attrs["rollout.run.id"] == "r1"
