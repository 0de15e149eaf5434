"""A griffe extension for the API page (mkdocstrings reads the sources' docstrings as Markdown):
the docstrings are written for a terminal and for Sphinx-style roles, not for Markdown, so

- a doctest (``>>>`` lines and the output under them) becomes a fenced ``pycon`` block: as
  Markdown, ``[(0, 8, ...)]`` under ``[... for c in split(...)]`` reads as a reference link;
- a role (``:func:`split```, ``:class:`~x.Index```) becomes the code span it names.

The sources are not changed; this runs on griffe's copy of each docstring.
"""

from __future__ import annotations

import re

from griffe import Extension

ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|obj|exc):`~?([^`]+)`")


def fence_doctests(text: str) -> str:
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            if out and out[-1].strip():
                out.append("")
            out += [indent + "```pycon", *(indent + b for b in block), indent + "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DocstringsAsMarkdown(Extension):
    def on_object(self, *, obj, loader, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", fence_doctests(obj.docstring.value))
