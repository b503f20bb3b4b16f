"""A SIGTERM whose C handler ran while the main thread was about to sleep in C (or on a
thread that does not block it) interrupts nothing: the main thread sleeps on and the
Python handler never runs. ``Pool.terminate()`` meets this with workers waiting on the
task queue's lock. The signal watch sends such a signal to the main thread again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from otel_rollout.report import read_sources

_JOB = textwrap.dedent(
    """
    import multiprocessing as mp, os, signal, sys, threading, time
    import otel_rollout
    from otel_rollout._setup import signal_watch

    out, where = sys.argv[1], sys.argv[2]
    rollout = otel_rollout.configure(output_dir=out)

    def trace(n, name):
        for i in range(n):
            with rollout.tracer.trajectory(f"{name}{i}", env="e") as t, t.generate():
                pass

    def sleeping(tid):
        with open(f"/proc/self/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "S"

    def asleep_a_while(tid):
        for _ in range(3):
            if not sleeping(tid):
                return False
            time.sleep(0.05)
        return True

    def missed():
        # the main thread waits on a multiprocessing lock, as an idle Pool worker does;
        # SIGTERM goes to a thread that does not block it: its C handler runs there and
        # the main thread, interrupted by nothing, sleeps on
        lock = mp.Lock()
        lock.acquire()
        main = threading.get_native_id()  # this thread: the main one

        def take():
            while not asleep_a_while(main):
                time.sleep(0.05)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

        threading.Thread(target=take, daemon=True).start()
        lock.acquire()
        print("the main thread went on", flush=True)  # the handler ends the process first

    if where == "main":
        trace(300, "t")
        missed()
    else:
        trace(10, "parent")
        pid = os.fork()
        if pid == 0:
            trace(300, "child")
            missed()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        # the child's signal reached its own watch, not this process's
        time.sleep(2 * signal_watch.GRACE_S)
        print("parent on", flush=True)
    """
)


def _run(tmp_path, where):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false")
    return subprocess.run([sys.executable, "-c", _JOB, str(tmp_path), where], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX threads")
def test_a_sigterm_the_main_thread_missed_still_flushes_and_ends_the_process(tmp_path):
    done = _run(tmp_path, "main")
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "went on" not in done.stdout
    assert done.stderr.count("SIGTERM received") == 1, done.stderr
    res = read_sources([str(tmp_path / "traces-*.jsonl")], warn=lambda m: None)
    assert len(res.trajectories) == 300 and res.losses == {}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_watches_its_own_signals(tmp_path):
    done = _run(tmp_path, "fork")
    assert done.returncode == 0, done.stderr  # the parent saw nothing of the child's signal
    assert f"child {-signal.SIGTERM}\nparent on\n" == done.stdout, done.stderr
    assert done.stderr.count("SIGTERM received") == 1, done.stderr
    res = read_sources([str(tmp_path / "traces-*.jsonl")], warn=lambda m: None)
    ids = [t.breakdown.trajectory_id for t in res.trajectories]
    expected = [f"child{i}" for i in range(300)] + [f"parent{i}" for i in range(10)]
    assert sorted(ids) == sorted(expected)
    assert res.losses == {}


_WAKEUP = textwrap.dedent(
    """
    import os, signal, sys
    import otel_rollout
    out, case = sys.argv[1], sys.argv[2]
    r, w = os.pipe()
    os.set_blocking(w, False)
    if case == "users":
        signal.set_wakeup_fd(w)  # as asyncio's add_signal_handler does
    rollout = otel_rollout.configure(output_dir=out)
    now = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(now)
    print("configured", "users" if now == w else "none" if now == -1 else "ours")
    rollout.shutdown()
    print("shut down", {w: "users", -1: "none"}.get(signal.set_wakeup_fd(-1), "ours"))
    """
)


@pytest.mark.parametrize(("case", "configured", "shut_down"),
                         [("none", "ours", "none"), ("users", "users", "users")])  # fmt: skip
def test_a_wakeup_fd_is_set_only_where_none_is_and_put_back(tmp_path, case, configured,
                                                           shut_down):  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false")
    done = subprocess.run([sys.executable, "-c", _WAKEUP, str(tmp_path), case], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"configured {configured}\nshut down {shut_down}\n"


_USERS = textwrap.dedent(
    """
    import multiprocessing as mp, signal, sys, threading, time
    import otel_rollout
    from otel_rollout._setup import signal_watch

    out, how = sys.argv[1], sys.argv[2]
    calls = []
    signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))  # a trainer's
    rollout = otel_rollout.configure(output_dir=out)
    lock = mp.Lock()
    lock.acquire()
    if how == "missed":  # taken by a thread that does not block it, as above
        threading.Timer(0.5, lambda: signal.pthread_kill(threading.get_ident(),
                                                         signal.SIGTERM)).start()
        lock.acquire(timeout=3)  # the watch sends it again, the handler returns: waits on
    else:
        threading.Timer(0.5, lambda: signal.pthread_kill(threading.main_thread().ident,
                                                         signal.SIGTERM)).start()
        lock.acquire(timeout=3)
    lock.acquire(timeout=3 * signal_watch.GRACE_S)  # time for a send too many
    print("calls", len(calls), flush=True)
    """
)


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX threads")
@pytest.mark.parametrize("how", ["taken by the main thread", "missed"])
def test_the_users_handler_runs_once_per_signal(tmp_path, how):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false")
    done = subprocess.run([sys.executable, "-c", _USERS, str(tmp_path), how.split()[0]],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "calls 1\n", done.stderr
