"""The README and the documentation site (mkdocs.yml, docs/) say what the code does:

- the site builds with ``mkdocs build --strict`` (a broken link or anchor, a page left out of the
  nav, a docstring mkdocstrings cannot render: each a warning, so a failure);
- docs/configuration.md is what docs/gen_config.py generates from the config's help texts;
- every ```python block of the README runs, from the repository root, in a fresh interpreter,
  and prints what the output block under it shows; every ```python block of docs/ runs too,
  except the few that need a built index or a store's server (``NEEDS`` says which and why):
  those are compiled and their imports executed, so a renamed module or name still fails;
- shell blocks are not run (they build indexes, start servers, write stores); instead every
  ``chunkline <command>`` they name, and every one in an inline code span, is checked against
  the CLI's parser (``pipeline/cli.py``): the command exists and takes each option named;
- every ```yaml block parses, and the README's relative links name files that exist.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))

# Python blocks of docs/ that cannot run here, by (page, index among its Python blocks).
NEEDS = {
    ("query.md", 0): "an index under out/ (chunkline run)",
    ("stores.md", 0): "LanceDB, PostgreSQL and Qdrant stores holding a synced index",
    ("access.md", 0): "a reader's PostgreSQL connection, a Qdrant client, a LanceDB store",
}

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(path: Path) -> list[tuple[str, str, int]]:
    """Each fenced block of a Markdown file: (language, body, offset of the fence's end)."""
    text = path.read_text(encoding="utf-8")
    return [(m[1], m[2], m.end()) for m in FENCE.finditer(text)]


def python_blocks(path: Path) -> list[tuple[str, str | None]]:
    """Each ```python block, with the untagged block right under it (its output), if any."""
    found, every = [], blocks(path)
    text = path.read_text(encoding="utf-8")
    for i, (language, body, end) in enumerate(every):
        if language != "python":
            continue
        output = None
        if i + 1 < len(every) and every[i + 1][0] == "":
            between = text[end:text.index("```", end)]
            if not between.strip():
                output = every[i + 1][1]
        found.append((body, output))
    return found


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def _param(label: str, code: str, output: str | None = None):
    slow = "apache_beam" in code  # a Beam pipeline: seconds of startup
    return pytest.param(code, output, id=label, marks=[pytest.mark.slow] if slow else [])


README_BLOCKS = [_param(f"README-{i}", code, output)
                 for i, (code, output) in enumerate(python_blocks(ROOT / "README.md"))]
DOCS_BLOCKS = [_param(f"{page.name}-{i}", code, output)
               for page in PAGES for i, (code, output) in enumerate(python_blocks(page))
               if (page.name, i) not in NEEDS]
SETUP_BLOCKS = [pytest.param(code, reason, id=f"{page}-{i}")
                for page, i, code, reason in
                ((page.name, i, code, NEEDS.get((page.name, i)))
                 for page in PAGES for i, (code, _) in enumerate(python_blocks(page)))
                if reason is not None]


def _check_output(result: subprocess.CompletedProcess, output: str | None) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    if output is not None:  # the block under it shows what it prints (order: Beam's, not ours)
        assert sorted(result.stdout.splitlines()) == sorted(output.splitlines()), result.stdout


@pytest.mark.parametrize("code, output", README_BLOCKS)
def test_readme_python_blocks_run(code, output):
    _check_output(run_python(code), output)


@pytest.mark.parametrize("code, output", DOCS_BLOCKS)
def test_docs_python_blocks_run(code, output):
    _check_output(run_python(code), output)


@pytest.mark.slow  # imports torch, lancedb, psycopg, qdrant-client
@pytest.mark.parametrize("code, reason", SETUP_BLOCKS)
def test_docs_python_blocks_that_need_a_setup_compile_and_import(code, reason):
    tree = ast.parse(code)  # a SyntaxError fails here
    imports = ast.Module(body=[node for node in ast.walk(tree)
                               if isinstance(node, (ast.Import, ast.ImportFrom))], type_ignores=[])
    result = run_python(ast.unparse(imports))
    assert result.returncode == 0, f"(not run: needs {reason})\n{result.stderr}"


def test_every_python_block_not_run_is_named():
    """NEEDS names only blocks that exist, so a block moved or removed is not silently skipped."""
    counts = {page.name: len(python_blocks(page)) for page in PAGES}
    for page, index in NEEDS:
        assert index < counts.get(page, 0), f"NEEDS names {page} block {index}: there is none"


# --- shell blocks and inline commands against the CLI ------------------------------------------

def _commands(path: Path) -> list[str]:
    """``chunkline ...`` command lines: in shell blocks (continuations joined, ``$ `` prompts of
    shown sessions included) and in inline code spans."""
    text = path.read_text(encoding="utf-8")
    found = []
    for language, body, _ in blocks(path):
        if language not in ("sh", "bash", "shell", "console", ""):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if language == "" and not line.startswith("$ "):
                continue  # an output block: only its prompts are commands
            line = line.removeprefix("$ ").strip()
            if re.match(r"(\S*/)?chunkline ", line):
                found.append(line)
    prose = FENCE.sub("", text).replace("\n", " ")
    found += [span for span in re.findall(r"`([^`]+)`", prose) if re.match(r"chunkline [a-z]", span)]
    return found


def _options(tokens: list[str]) -> list[str]:
    """The options a command line names, up to a bare ``--`` (what follows is Beam's)."""
    named = []
    for token in tokens:
        token = token.lstrip("[").rstrip("]")
        if token == "--":
            break
        if re.match(r"--?[a-zA-Z]", token):
            named.append(token.split("=")[0].rstrip("]"))
    return named


COMMAND_SOURCES = [ROOT / "README.md", *PAGES]


def test_every_chunkline_command_in_the_docs_exists():
    from chunkline.pipeline.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    problems, seen = [], 0
    for path in COMMAND_SOURCES:
        for line in _commands(path):
            tokens = shlex.split(line.replace("...", ""), comments=True)
            start = next(i for i, token in enumerate(tokens) if re.fullmatch(r"(\S*/)?chunkline", token))
            name = tokens[start + 1] if len(tokens) > start + 1 else ""
            seen += 1
            if name not in commands:
                problems.append(f"{path.name}: `{line}`: no command {name!r}")
                continue
            known = commands[name]._option_string_actions
            problems += [f"{path.name}: `{line}`: chunkline {name} has no option {option}"
                         for option in _options(tokens[start + 2:]) if option not in known]
    assert seen > 20
    assert not problems, "\n".join(problems)


def test_the_readme_names_its_commands_in_shell_blocks():
    names = {line.split()[1] for line in _commands(ROOT / "README.md")}
    assert {"run", "query"} <= names


# --- yaml blocks, links, the generated configuration page ---------------------------------------

def test_yaml_blocks_parse():
    for path in COMMAND_SOURCES:
        for language, body, _ in blocks(path):
            if language == "yaml":
                assert isinstance(yaml.safe_load(body), dict), f"{path.name}: {body[:60]}"


def test_readme_links_name_files_that_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [target for target in targets
               if "://" not in target and not (ROOT / target).exists()]
    assert not missing


def _gen_config():
    spec = importlib.util.spec_from_file_location("gen_config", DOCS / "gen_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_page_is_generated_from_the_help_texts():
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert page == _gen_config().render(), (
        "docs/configuration.md is not what docs/gen_config.py writes from pipeline/config.py: "
        "run .venv/bin/python docs/gen_config.py")


def test_configuration_page_holds_every_key():
    """Every key of every section has its row, under its section's heading."""
    from pydantic import BaseModel

    from chunkline.pipeline.config import Config

    page = (DOCS / "configuration.md").read_text(encoding="utf-8")

    def sections(model, path):
        for name, spec in model.model_fields.items():
            for hint in (spec.annotation, *getattr(spec.annotation, "__args__", ())):
                if isinstance(hint, type) and issubclass(hint, BaseModel):
                    key = f"{path}.{name}" if path else name
                    yield key, hint
                    yield from sections(hint, key)

    for key, model in sections(Config, ""):
        heading = f"\n{'#' * min(key.count('.') + 2, 6)} {key}\n"
        assert heading in page, key
        below = page.split(heading)[1]
        for name in model.model_fields:
            assert f"| `{name}` |" in below, f"{key}.{name}"


# --- the site ----------------------------------------------------------------------------------

@pytest.mark.slow  # a few seconds: mkdocs, mkdocstrings reading the sources
def test_docs_build_strict(tmp_path):
    for module in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=f"{module} is not installed (pyproject.toml's dev extra: "
                            "mkdocs, mkdocstrings-python)")
    # As on a fresh clone: the installed layout the API reference reads (docs/hooks.py) is made
    # by the build itself, before mkdocstrings looks for it.
    shutil.rmtree(ROOT / "build" / "namespace", ignore_errors=True)
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                             str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "pip install" in home and 'href="configuration/"' in home  # the README, links rewritten
    assert (tmp_path / "site" / "results" / "index.html").exists()  # bench/RESULTS.md
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="chunkline.transforms.chunk.ChunkTexts"' in api and 'class="language-pycon"' in api
