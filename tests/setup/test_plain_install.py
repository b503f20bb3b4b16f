"""A plain install (no extras) never hurts a training run: what a cluster's environment
asks for and the install lacks warns once and the local trace file is kept; the command
line names its extra; a disabled setup gives the keys a loop reads. A venv without
extras is simulated by blocking imports in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Runs the rest of argv as ``python -c`` with the given top-level imports failing as
#: they do where a package is not installed.
BLOCKER = """
import sys
BLOCK = tuple(sys.argv.pop(1).split(","))
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(BLOCK):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocker())
code = sys.argv.pop(1)
exec(compile(code, "<test>", "exec"))
"""

#: What the [otlp] extra installs.
OTLP = "opentelemetry.exporter,opentelemetry.proto,google.protobuf,grpc"
#: What the [cli] extra installs beyond it.
CLI = "rich,textual,matplotlib,skyrl_gym"


def run_without(blocked: str, code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base.update(PYTHONPATH=str(ROOT), OTEL_ROLLOUT_ANNOUNCE="false", **env)
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, blocked, code], capture_output=True, text=True,
        timeout=120, cwd=tmp_path, env=base,
    )  # fmt: skip


LOOP = """
import otel_rollout
rollout = otel_rollout.configure(output_dir="out")
with rollout.tracer.trajectory("t0", env="e") as traj:
    with traj.generate():
        pass
assert rollout.shutdown()
print(rollout.settings.traces_exporter, rollout.settings.metrics_exporter)
"""


def test_an_otlp_endpoint_without_the_otlp_extra_warns_once_and_keeps_the_trace_file(tmp_path):
    done = run_without(OTLP, LOOP, tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4317")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["file", "none"]
    assert done.stderr.count("pip install 'otel-rollout[otlp]'") == 1, done.stderr
    (path,) = (tmp_path / "out").glob("traces-*.jsonl")
    names = [
        s["name"]
        for line in path.read_text().splitlines()
        for rs in json.loads(line).get("resourceSpans", [])
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]
    assert "trajectory" in names


def test_the_command_line_without_the_cli_extra_says_so_in_one_line(tmp_path):
    code = "import sys; from otel_rollout.cli import main; sys.argv[0] = 'otel-rollout'; " \
           "sys.exit(main(['--help']))"  # fmt: skip
    done = run_without(CLI, code, tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "otel-rollout: the command line needs rich; install with: pip install 'otel-rollout[cli]'"
    ]


def test_a_disabled_setup_gives_the_keys_a_loop_reads_each_saying_no_data(monkeypatch):
    import math

    import otel_rollout

    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    rollout = otel_rollout.configure(local=True)
    with (
        rollout.tracer.batch(step=0) as batch,
        rollout.tracer.trajectory("t0", env="e") as traj,
        traj.generate(),
    ):
        pass
    figures = otel_rollout.summarize(rollout.collector.drain())
    figures.update(batch.analysis.summary())
    assert math.isnan(figures["generate/trajectory_time_llm_p90"])
    assert math.isnan(figures["generate/batch_slot_frac_empty"])
    assert rollout.shutdown()
