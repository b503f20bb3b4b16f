"""multiprocessing workers started by fork or forkserver end through ``os._exit``, which
skips exit hooks; what each traced still reaches its trace file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from otel_rollout.report import read_sources

_JOB = textwrap.dedent(
    """
    import multiprocessing as mp, os, sys
    import otel_rollout

    OUT = sys.argv[1]

    def work(n, configure_here):
        rollout = otel_rollout.configure(output_dir=OUT) if configure_here else None
        tracer = (rollout or otel_rollout.get_rollout()).tracer
        for i in range(n):
            with tracer.trajectory(f"{os.getpid()}-{i}", env="e") as t, t.generate():
                pass
        return n

    if __name__ == "__main__":
        method, how = sys.argv[2], sys.argv[3]
        ctx = mp.get_context(method)
        in_parent = method == "fork"  # forkserver workers do not inherit the setup
        if in_parent:
            parent = otel_rollout.configure(output_dir=OUT)
        if how == "process":
            procs = [ctx.Process(target=work, args=(300, not in_parent)) for _ in range(2)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        else:  # a pool, closed and joined; then one left by `with` (terminate: SIGTERM)
            with ctx.Pool(2) as pool:
                done = pool.starmap(work, [(150, not in_parent)] * 4)
                assert done == [150] * 4
                if how == "pool-join":
                    pool.close()
                    pool.join()
        if in_parent:
            with parent.tracer.trajectory("parent", env="e"):
                pass
    """
)


@pytest.mark.parametrize("how", ["process", "pool-join", "pool-terminate"])
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_what_workers_traced_reaches_their_trace_files(tmp_path, method, how):
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(script), str(out), method, how], env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    res = read_sources([str(out / "traces-*.jsonl")], warn=lambda m: None)
    ids = [t.breakdown.trajectory_id for t in res.trajectories]
    expected = 600 + (method == "fork")  # and the parent's own
    assert len(ids) == expected, (len(ids), done.stderr[-2000:])
    assert res.losses == {}
    # each process's summary names the file it wrote (a worker's, not its parent's)
    shown = {line.split("traces: ")[1] for line in done.stderr.splitlines() if "  traces: " in line}
    assert shown == {str(f) for f in out.glob("traces-*.jsonl")}
