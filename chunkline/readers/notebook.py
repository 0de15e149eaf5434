"""Jupyter notebooks (``.ipynb``: nbformat 4, and 3's worksheets) to Markdown: Markdown cells as
they are, code cells as fenced code blocks tagged with the kernel's language, raw cells and
every output left out (outputs are results, often images or long logs, not the notebook's own
text). The JSON is parsed with the standard library (the format is documented at
nbformat.readthedocs.io, "The Notebook file format"); nothing is executed.
"""

from __future__ import annotations

import json
from typing import Any

from chunkline.readers.formats import EMPTY
from chunkline.readers.markdown import blocks, fenced, heading
from chunkline.readers.office import Converted


def _source(cell: dict[str, Any], key: str = "source") -> str:
    value = cell.get(key, "")
    return "".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""


def language_of(notebook: dict[str, Any]) -> str:
    """The kernel's language: ``metadata.kernelspec.language``, else
    ``metadata.language_info.name``, else ``metadata.language`` (nbformat 3), else python."""
    given = notebook.get("metadata")
    metadata = given if isinstance(given, dict) else {}
    for found in ((metadata.get("kernelspec") or {}).get("language"),
                  (metadata.get("language_info") or {}).get("name"), metadata.get("language")):
        if isinstance(found, str) and found.strip():
            return found.strip().lower()
    return "python"


def read_notebook(text: str) -> Converted | str:
    """A notebook's decoded JSON text as Markdown with its kernel and language as metadata, or
    the reason it has none. Never raises."""
    try:
        notebook = json.loads(text)
    except ValueError as exc:
        return f"not a readable notebook (invalid JSON: {exc})"
    if not isinstance(notebook, dict):
        return "not a readable notebook (the JSON is not an object)"
    cells = notebook.get("cells")
    if cells is None and isinstance(notebook.get("worksheets"), list):  # nbformat 3
        cells = [cell for sheet in notebook["worksheets"] if isinstance(sheet, dict)
                 for cell in sheet.get("cells") or []]
    if not isinstance(cells, list):
        return "not a readable notebook (no list of cells)"
    language = language_of(notebook)
    parts: list[str] = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        kind = cell.get("cell_type")
        if kind == "markdown":
            parts.append(_source(cell).strip("\n"))
        elif kind == "heading":  # nbformat 3
            parts.append(heading(int(cell.get("level") or 1), _source(cell)))
        elif kind == "code":
            code = _source(cell) or _source(cell, "input")  # nbformat 3 keeps code in "input"
            if code.strip():
                parts.append(fenced(code, language))
    text_out = blocks(parts)
    if not text_out.strip():
        return f"{EMPTY} (no Markdown or code in {len(cells)} cell(s))"
    metadata: dict[str, Any] = {"language": language}
    kernel = ((notebook.get("metadata") or {}).get("kernelspec") or {}).get("name")
    if isinstance(kernel, str) and kernel:
        metadata["kernel"] = kernel
    title = (notebook.get("metadata") or {}).get("title")
    if isinstance(title, str) and title.strip():
        metadata["title"] = title.strip()
    return Converted(text_out, metadata)
