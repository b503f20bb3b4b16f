"""``otel-rollout top`` in a real terminal (tmux, 80x24) while a configure()d run writes its
trace file in another process: running trajectories appear, the tail forms, and at the
end the screen's figures are ``report``'s; ``q`` quits."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from _backends import wait_until

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="needs tmux (Debian package tmux; .ci/run installs it)"
)
pytest.importorskip("textual")

WRITER = Path(__file__).parent.parent / "_support" / "_live_writer.py"


class Terminal:
    """A tmux session on a tmux server of its own (``-S``): a shared server exits when
    its last session is killed, and a session started at that moment fails."""

    def __init__(self, command: str, width: int = 80, height: int = 24) -> None:
        self.name = f"top-{uuid.uuid4().hex[:8]}"
        subprocess.run([*self.tmux, "new-session", "-d", "-s", self.name, "-x", str(width),
                        "-y", str(height), command], check=True)  # fmt: skip

    @property
    def tmux(self) -> list[str]:
        return ["tmux", "-S", str(Path(tempfile.gettempdir()) / f"{self.name}.sock")]

    def screen(self) -> str:
        out = subprocess.run([*self.tmux, "capture-pane", "-p", "-t", self.name],
                             capture_output=True, text=True)  # fmt: skip
        return out.stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def resize(self, width: int, height: int) -> None:
        subprocess.run([*self.tmux, "resize-window", "-t", self.name, "-x", str(width),
                        "-y", str(height)], check=True)  # fmt: skip

    def alive(self) -> bool:
        return subprocess.run([*self.tmux, "has-session", "-t", self.name],
                              capture_output=True).returncode == 0  # fmt: skip

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)
        Path(self.tmux[-1]).unlink(missing_ok=True)


def _env_clean() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["TERM"] = "xterm-256color"
    return env


def _until(term: Terminal, what: str, ok, timeout_s: float = 60.0, every_s: float = 0.2) -> str:
    """The screen, once ``ok(screen)`` holds."""

    def probe() -> str | None:
        screen = term.screen()
        return screen if ok(screen) else None

    return wait_until(what, probe, timeout_s=timeout_s, every_s=every_s)


_STRAGGLER = re.compile(r"s00 +code +llm +\S+ +(\d+\.\d+)s")


def test_top_follows_a_run_in_a_real_terminal(tmp_path):
    out = tmp_path / "otel-rollout-output"
    out.mkdir()
    writer = subprocess.Popen([sys.executable, str(WRITER), str(out), "3", "8", "4.0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env_clean())  # fmt: skip
    # top started in the folder's parent with no SOURCE: the default folder
    term = Terminal(f"cd {tmp_path} && {sys.executable} -m otel_rollout.cli top; sleep 60")
    try:
        # the tail forms: seven finished, the straggler s00 still in its generate call
        screen = _until(term, "the tail forming", lambda s: re.search(
            r"7 finished .*1 running", s) and _STRAGGLER.search(s))  # fmt: skip
        assert "otel-rollout top" in screen and "terminal-test" in screen
        assert all(len(line) <= 80 for line in screen.splitlines())
        first = float(_STRAGGLER.search(screen).group(1))
        later = _until(term, "the straggler's age growing", lambda s: (
            m := _STRAGGLER.search(s)) is not None and float(m.group(1)) > first + 1)  # fmt: skip
        assert "1 running" in later
        _, stderr = writer.communicate(timeout=120)
        assert writer.returncode == 0, stderr
        screen = _until(term, "the end", lambda s: "done/running 24/0" in s and "step 2" in s,
                        timeout_s=30)  # fmt: skip
        report = subprocess.run([sys.executable, "-m", "otel_rollout.cli", "report",
                                 str(out / "*.jsonl"), "--format", "json"],
                                capture_output=True, text=True, check=True)  # fmt: skip
        data = json.loads(report.stdout)
        assert data["found"] == 24
        for batch in data["batches"]:
            lines = [x for x in screen.splitlines() if f"step {batch['step']} " in x]
            assert len(lines) == 1, screen
            line = lines[0]
            assert f"{100 * batch['slot_frac']['empty']:.0f}%" in line
            assert batch["stragglers"][-1]["trace_id"][:8] in line
        term.keys("q")
        gone = _until(term, "quit", lambda s: "otel-rollout top" not in s)
        assert "Traceback" not in gone
    finally:
        if writer.poll() is None:
            writer.kill()
        term.close()


def test_a_missing_source_is_a_line_on_screen_not_a_traceback(tmp_path):
    term = Terminal(f"{sys.executable} -m otel_rollout.cli top {tmp_path}/nothing; sleep 60")
    try:
        screen = _until(term, "the line", lambda s: "no such file or folder" in s.replace(
            "\n  ", " "), timeout_s=30)  # a long path wraps  # fmt: skip
        assert "Traceback" not in screen and "waiting" in screen
    finally:
        term.close()
