"""A signal that ends the process (SIGTERM from Slurm or Kubernetes, SIGHUP) first flushes
what was traced and prints the summary; the user's own handler still runs, after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from _otel_env import clean_otel_env

from otel_rollout.report import read_sources
from otel_rollout.testing.receiver import OTLPReceiver

#: A child's first line: SIGHUP as a terminal leaves it, not ignored as under ``nohup``
#: (the child inherits the test run's disposition).
_HUP_DEFAULT = "import signal; signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"

_TRAINER = _HUP_DEFAULT + textwrap.dedent(
    """
    import os, signal, sys, time
    import otel_rollout
    out, mode = sys.argv[1], sys.argv[2]
    if mode == "user":
        def mine(signum, frame):  # a trainer's handler: report what reached the file, exit 3
            from otel_rollout.report import read_sources
            found = read_sources([os.path.join(out, "traces-*.jsonl")], warn=lambda m: None)
            print("user handler", len(found.trajectories), flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, mine)
    rollout = otel_rollout.configure(output_dir=out)
    for i in range(2000):
        with rollout.tracer.trajectory(f"t{i}", env="e") as t, t.generate():
            pass
    print("ready", flush=True)
    time.sleep(120)
    """
)


def _trainer(tmp_path, mode, extra_env=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false", **(extra_env or {}))
    proc = subprocess.Popen([sys.executable, "-c", _TRAINER, str(tmp_path), mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def _found(tmp_path):
    res = read_sources([str(tmp_path / "traces-*.jsonl")], warn=lambda m: None)
    return len(res.trajectories)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminating_signal_flushes_summarises_and_ends_the_process_by_that_signal(
    tmp_path, signum
):
    proc = _trainer(tmp_path, "default")
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signum  # the default action, as without otel-rollout
    assert f"{signal.Signals(signum).name} received" in err
    assert "otel-rollout: 2000 trajectories" in err  # the summary
    assert _found(tmp_path) == 2000


def test_a_terminating_signal_flushes_to_a_slow_otlp_endpoint_within_the_bound(tmp_path):
    receiver = OTLPReceiver().start()
    receiver.delay_s = 0.05  # each export request answered after 50 ms
    try:
        # a queue that holds the whole run: what is lost here is what the signal cost
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint,
               "OTEL_METRICS_EXPORTER": "none", "OTEL_BSP_MAX_QUEUE_SIZE": "8192"}  # fmt: skip
        proc = _trainer(tmp_path, "default", env)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGTERM, err
        roots = [s for s in receiver.spans() if s.name == "trajectory"]
        assert len(roots) == 2000, err[-2000:]
        assert "were not exported" not in err
    finally:
        receiver.stop()


def test_the_users_handler_runs_after_the_flush(tmp_path):
    proc = _trainer(tmp_path, "user")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert "user handler 2000" in out  # everything was in the file when it ran
    assert "otel-rollout: 2000 trajectories" in err  # its sys.exit ran the exit hook
    assert _found(tmp_path) == 2000


def test_the_setting_off_leaves_the_signal_to_its_default(tmp_path):
    proc = _trainer(tmp_path, "default", {"OTEL_ROLLOUT_FLUSH_ON_SIGNALS": "false"})
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    assert "trajectories" not in err  # nothing flushed, no summary: what it was before


_HANDLERS = _HUP_DEFAULT + textwrap.dedent(
    """
    import signal, sys, threading
    import otel_rollout
    from otel_rollout._setup import preemption
    out, case = sys.argv[1], sys.argv[2]
    def mine(signum, frame):
        pass
    def name(h):
        return {signal.SIG_DFL: "default", signal.SIG_IGN: "ignored", mine: "mine",
                preemption._handler: "ours"}.get(h, repr(h))
    if case == "local":
        r = otel_rollout.configure(local=True, output_dir=out)
    elif case == "thread":
        t = threading.Thread(target=lambda: otel_rollout.configure(output_dir=out))
        t.start(); t.join()
        r = otel_rollout.get_rollout()
    elif case == "ignored":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup does
        r = otel_rollout.configure(output_dir=out)
    else:
        r = otel_rollout.configure(output_dir=out)
    print("configured", name(signal.getsignal(signal.SIGTERM)),
          name(signal.getsignal(signal.SIGHUP)))
    if case == "later":
        signal.signal(signal.SIGTERM, mine)  # the user's, set after configure()
    r.shutdown()
    print("shut down", name(signal.getsignal(signal.SIGTERM)),
          name(signal.getsignal(signal.SIGHUP)))
    """
)


@pytest.mark.parametrize(
    ("case", "configured", "shut_down"),
    [
        ("global", "ours ours", "default default"),  # put back at shutdown
        ("local", "default default", "default default"),  # local=True: no global state
        ("thread", "default default", "default default"),  # signals belong to the main thread
        ("ignored", "ours ignored", "default ignored"),  # SIG_IGN stays ignored
        ("later", "ours ours", "mine default"),  # a handler set later is never replaced
    ],
)
def test_which_handlers_are_installed_and_put_back(tmp_path, monkeypatch, case, configured,
                                                   shut_down):  # fmt: skip
    clean_otel_env(monkeypatch)
    env = dict(os.environ, PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false")
    done = subprocess.run([sys.executable, "-c", _HANDLERS, str(tmp_path), case], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"configured {configured}\n" in done.stdout
    assert f"shut down {shut_down}\n" in done.stdout


_MASKS = textwrap.dedent(
    """
    import os, signal, threading
    import otel_rollout
    rollout = otel_rollout.configure()
    for i in range(50):
        with rollout.tracer.trajectory(f"t{i}", env="e"):
            pass
    assert rollout.force_flush(10)  # the exporter's own threads (gRPC's) are running now
    names = {t.native_id: t.name for t in threading.enumerate()}
    main = threading.main_thread().native_id
    both = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
    for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                fields = dict(line.split(":\\t", 1) for line in f.read().splitlines())
        except FileNotFoundError:  # a short-lived thread ended meanwhile
            continue
        blocked = int(fields["SigBlk"], 16) & both == both
        name = "MAIN" if tid == main else names.get(tid, fields["Name"])
        print(name, "blocks" if blocked else "takes")
    rollout.shutdown()
    """
)

#: Threads the export pipeline starts (the SDK's, gRPC's, otel-rollout's own).
_PIPELINE_THREADS = ("Otel", "otel-rollout", "grpc", "event_engine", "lifeguard")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")
@pytest.mark.parametrize("hup", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "nohup"])
def test_threads_the_pipeline_starts_leave_the_signals_to_the_main_thread(tmp_path, hup):
    # under nohup SIGHUP is not handled, yet a handler the user sets later must reach the
    # main thread: every thread started still blocks it
    receiver = OTLPReceiver().start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false",
                   OTEL_EXPORTER_OTLP_ENDPOINT=receiver.grpc_endpoint,
                   OTEL_METRICS_EXPORTER="none")  # fmt: skip
        first = f"import signal; signal.signal(signal.SIGHUP, signal.{hup.name})\n"
        done = subprocess.run([sys.executable, "-c", first + _MASKS], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        threads = [line.rsplit(" ", 1) for line in done.stdout.splitlines()]
        assert ["MAIN", "takes"] in threads
        ours = [t for t in threads if t[0].startswith(_PIPELINE_THREADS)]
        assert len(ours) >= 2, threads  # the batch processor, gRPC's
        assert [t for t in ours if t[1] != "blocks"] == [], threads
    finally:
        receiver.stop()


_CHILD_MASKS = textwrap.dedent(
    """
    import os, signal, sys, threading
    import otel_rollout
    rollout = otel_rollout.configure(metrics_exporter="none", output_dir=sys.argv[1])
    with rollout.tracer.trajectory("before", env="e"):
        pass
    assert rollout.force_flush(10)  # the export thread runs before the fork
    pid = os.fork()
    if pid == 0:  # the SDK restarts its export thread here; the in-flight one starts here
        for i in range(20):
            with rollout.tracer.trajectory(f"t{i}", env="e"):
                pass
        rollout.force_flush(10)
        names = {t.native_id: t.name for t in threading.enumerate()}
        both = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
        for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
            with open(f"/proc/self/task/{tid}/status") as f:
                fields = dict(line.split(":\\t", 1) for line in f.read().splitlines())
            blocked = int(fields["SigBlk"], 16) & both == both
            name = "MAIN" if tid == os.getpid() else names.get(tid, fields["Name"])
            print(name, "blocks" if blocked else "takes", flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    print("PARENT", "blocks" if signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
          else "takes")
    rollout.shutdown()
    """
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")
def test_threads_restarted_in_a_forked_child_leave_the_signals_to_its_main_thread(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false")
    done = subprocess.run([sys.executable, "-c", _CHILD_MASKS, str(tmp_path)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    threads = [line.rsplit(" ", 1) for line in done.stdout.splitlines()]
    assert ["MAIN", "takes"] in threads and ["PARENT", "takes"] in threads, threads
    ours = [t for t in threads if t[0].startswith(_PIPELINE_THREADS)]
    # the SDK's export thread (restarted by its fork hook), the in-flight one
    assert len(ours) >= 2, threads
    assert [t for t in ours if t[1] != "blocks"] == [], threads
