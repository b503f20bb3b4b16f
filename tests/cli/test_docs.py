"""The README and the docs say what works: every Python block compiles, every name it
imports from otel_rollout exists, every ``otel_rollout.NAME`` they mention is there, the
blocks marked ``<!-- run -->`` run, the README stays a landing page (10 KB at most) with
the test command CI runs, and every docs page is in the site's nav."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")
PAGES = [README, *DOCS]
_BLOCK = re.compile(r"(<!-- run -->\s*\n)?```python\n(.*?)```", re.S)


def _blocks(path: Path) -> list[tuple[int, bool, str]]:
    """(line, marked to run, source) of each Python block of a page."""
    text = path.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 1, bool(m.group(1)), m.group(2))
            for m in _BLOCK.finditer(text)]  # fmt: skip


BLOCKS = [
    pytest.param(page, line, run, src, id=f"{page.name}:{line}")
    for page in PAGES
    for line, run, src in _blocks(page)
]


def _otel_rollout_imports(tree: ast.AST) -> list[tuple[str, str | None]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("otel_rollout"):
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.startswith("otel_rollout")]
    return out


@pytest.mark.parametrize(("page", "line", "run", "src"), BLOCKS)
def test_every_python_block_compiles_and_its_otel_rollout_imports_exist(page, line, run, src):
    # Snippets may use ``await`` / ``async with`` at top level, as inside an agent loop.
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(src, f"{page.name}:{line}", "exec", flags=flags)
    for module, name in _otel_rollout_imports(tree):
        mod = importlib.import_module(module)
        if name is not None and name != "*":
            assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), (
                f"{page.name}:{line}: from {module} import {name}"
            )


def _mentioned_names(text: str) -> set[str]:
    """``otel_rollout.NAME`` in the text, leaving out logger names (``... logger``)."""
    return {m.group(1) for m in re.finditer(r"\botel_rollout\.([A-Za-z_][A-Za-z0-9_]*)", text)
            if not text[m.end() : m.end() + 9].startswith("` logger")}  # fmt: skip


def _bound(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
    return names


#: Names a block that has imports must import itself: the trainers' modules and our
#: instrumentors (a reader copies such a block whole).
_MUST_IMPORT = re.compile(r"^(ray|otel_rollout|otel_ray|\w+Instrumentor)$")


@pytest.mark.parametrize(("page", "line", "run", "src"), BLOCKS)
def test_a_block_with_imports_imports_the_modules_and_instrumentors_it_uses(page, line, run, src):
    tree = compile(src, "x", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if not any(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(tree)):
        return  # a fragment of a longer example
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    missing = sorted(n for n in used - _bound(tree) if _MUST_IMPORT.match(n))
    assert not missing, f"{page.name}:{line} uses {missing} without importing them"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_public_name_a_page_mentions_exists(page):
    import otel_rollout

    missing = []
    for name in sorted(_mentioned_names(page.read_text(encoding="utf-8"))):
        if hasattr(otel_rollout, name):
            continue
        if importlib.util.find_spec(f"otel_rollout.{name}") is None:
            missing.append(name)
    assert not missing, f"{page.name} mentions otel_rollout.{missing}, which do not exist"


RUNNABLE = [p for p in BLOCKS if p.values[2]]


@pytest.mark.parametrize(("page", "line", "run", "src"), RUNNABLE)
def test_blocks_marked_run_run(page, line, run, src, tmp_path):
    """In a fresh interpreter, in an empty folder, with no OTEL_* variable set, and without
    a deprecation warning for what the block itself calls."""
    if "import wandb" in src:
        pytest.importorskip("wandb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WANDB_"))}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(tmp_path))
    script = tmp_path / "block.py"
    script.write_text(src, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-W", "default::DeprecationWarning", str(script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    assert proc.returncode == 0, f"{page.name}:{line}\n{proc.stdout}\n{proc.stderr}"
    # what the page shows is the API as it stands, not a deprecated name
    assert not re.search(r"block\.py:\d+: DeprecationWarning", proc.stderr), proc.stderr


def test_the_readme_has_runnable_examples():
    assert RUNNABLE and any(p.values[0] == README for p in RUNNABLE)


def test_the_readme_is_a_landing_page_of_at_most_10_kb():
    assert len(README.read_bytes()) <= 10 * 1024


def _readme_test_command() -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"^.*(\.venv/bin/python -m pytest[^\n`]*)", text, re.M)
    assert m, "the README shows the test command"
    return m.group(1).strip()


def test_the_readme_test_command_shows_failures_and_skip_reasons_and_is_the_one_ci_runs():
    command = _readme_test_command()
    assert any(o.startswith("-r") and "s" in o and "f" in o for o in command.split())
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_readme_links_to_files_the_repository_has():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith(("http://", "https://", "mailto:"))]
    assert local and all((ROOT / link).exists() for link in local), [
        link for link in local if not (ROOT / link).exists()
    ]


def test_every_docs_page_is_in_the_site_nav():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(nav):
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                yield from pages(value)
            else:
                yield value

    assert sorted(["index.md", *(p.name for p in DOCS)]) == sorted(pages(config["nav"]))


def test_code_and_tests_cite_the_design_page_the_repository_has():
    assert (ROOT / "docs" / "design.md").exists()
    stale = []
    for path in [
        *ROOT.joinpath("otel_rollout").rglob("*.py"),
        *ROOT.joinpath("tests").rglob("*.py"),
    ]:
        text = path.read_text(encoding="utf-8")
        if re.search(r"(?<!docs/)\bDESIGN\.md\b", text) and path.name != "test_docs.py":
            stale.append(str(path.relative_to(ROOT)))
    assert not stale, f"cite docs/design.md, not DESIGN.md: {stale}"


def test_the_site_home_page_is_the_readme(tmp_path):
    pytest.importorskip("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Drop it into your trainer" in home and 'src="images/batch-timeline.png"' in home
