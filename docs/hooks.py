"""MkDocs hooks (mkdocs.yml ``hooks:``): pages made from files outside docs/ at build time, so
there is one copy of each.

- ``index.md``: the README, its links into docs/ made relative to the site (``docs/stores.md``
  -> ``stores.md``, ``bench/RESULTS.md`` -> ``results.md``). Any other relative link in the
  README has no page in the site and fails the strict build.
- ``results.md``: ``bench/RESULTS.md``, the benchmarks' figures and how they were taken; an
  angle-bracketed name outside code (``<frozen posixpath>`` in a traceback column) is shown as
  text rather than read as an HTML tag, and a list right under its paragraph gets the blank
  line Python-Markdown needs to see a list (GitHub needs none).

The API reference is read from the code statically (mkdocstrings' griffe, from the folders
mkdocs.yml's ``paths`` names). The installed layout, pipeline/ and transforms/ as
chunkline.pipeline and chunkline.transforms (pyproject.toml's package-dir), exists only once
installed, so ``on_config`` copies the sources in that layout under build/namespace (griffe
follows a symbolic link to its target's folder, which would lose the mapping): the reference
names each object as users import it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
# The HTML bench/RESULTS.md means as HTML (a collapsed table); any other <name ...> is text.
HTML_TAGS = r"(?!/?(?:details|summary|br|sub|sup)\b)"
LIST_ITEM = re.compile(r"(?:[-*]|\d+\.) ")
LINKS = ((re.compile(r"\]\(docs/"), "]("), (re.compile(r"\]\(bench/RESULTS\.md"), "](results.md"))


NAMESPACE = ROOT / "build" / "namespace"
MAPPED = {"pipeline": ROOT / "pipeline", "transforms": ROOT / "transforms"}


# Before every plugin's on_config (priority 0 by default): mkdocstrings-python keeps only the
# `paths` that exist when it is configured, so on a fresh clone the layout must be there first.
@event_priority(100)
def on_config(config):
    package = NAMESPACE / "chunkline"
    shutil.rmtree(NAMESPACE, ignore_errors=True)
    sources = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "chunkline", package, ignore=sources)
    for name, folder in MAPPED.items():
        shutil.copytree(folder, package / name, ignore=sources)
    return config


def readme_page() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for pattern, replacement in LINKS:
        text = pattern.sub(replacement, text)
    return text


def results_page() -> str:
    lines, fence = [], False
    for line in (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8").split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            parts = line.split("`")
            parts[0::2] = [re.sub("<" + HTML_TAGS + r"(?=[A-Za-z/])", "&lt;", part)
                           for part in parts[0::2]]
            line = "`".join(parts)
            previous = lines[-1] if lines else ""
            if LIST_ITEM.match(line) and previous.strip() and not previous[0].isspace() \
                    and not LIST_ITEM.match(previous) and not previous.startswith(("|", "#")):
                lines.append("")
        lines.append(line)
    return "\n".join(lines)


def on_files(files, config):
    files.append(File.generated(config, "index.md", content=readme_page()))
    files.append(File.generated(config, "results.md", content=results_page()))
    return files
