"""Rows of a sheet (an XLSX worksheet, a CSV or TSV file) as Markdown sections: a heading
named after the sheet, then a pipe table whose first row is the sheet's first non-empty row.

A sheet of more than ``max_rows`` body rows becomes several sections, cut between rows, each
with the header row again and its rows' numbers in the heading (``Orders (rows 2-501)``), so no
table is larger than the bound and a chunk's heading path says where in the sheet it is. The
splitter then repeats the header in every chunk a section's table is cut into
(``ChunkRecord.table_header``).
"""

from __future__ import annotations

import datetime as dt
from typing import Iterable, Iterator, Sequence

from chunkline.readers.markdown import heading, pipe_table


def cell_text(value: object) -> str:
    """A cell's value as the sheet shows it, in a form that does not depend on the locale: an
    integral float without its ``.0`` (spreadsheets store every number as a double), booleans
    as Excel writes them, dates and times in ISO 8601 (a date at midnight as the date alone).

    >>> [cell_text(v) for v in (None, 3.0, 0.1, True, dt.datetime(2024, 5, 1), "x")]
    ['', '3', '0.1', 'TRUE', '2024-05-01', 'x']
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() and value.tzinfo is None \
            else value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return str(value)


def _trimmed(values: Sequence[object]) -> list[str]:
    cells = [cell_text(value) for value in values]
    while cells and not cells[-1].strip():
        cells.pop()
    return cells


def sheet_sections(name: str, rows: Iterable[tuple[int, Sequence[object]]],
                   max_rows: int) -> Iterator[str]:
    """The Markdown sections of one sheet: ``rows`` are (row number, cell values) in order;
    empty rows (every cell empty) are left out, and trailing empty cells of a row too. Nothing
    for a sheet without a non-empty row. Heading level 1, named ``name``; when the sheet is cut,
    ``name (rows A-B)`` with the first and last row number of each piece."""
    header: list[str] | None = None
    batch: list[tuple[int, list[str]]] = []
    pieces = 0

    def section(final: bool) -> str:
        first, last = batch[0][0], batch[-1][0]
        rows_shown = f"rows {first}-{last}" if last != first else f"row {first}"
        title = name if final and pieces == 0 else f"{name} ({rows_shown})"
        return heading(1, title) + "\n\n" + pipe_table(header or [], [cells for _, cells in batch])

    for number, values in rows:
        cells = _trimmed(values)
        if not cells:
            continue
        if header is None:
            header = cells
            continue
        if len(batch) == max_rows:
            yield section(final=False)
            pieces += 1
            batch = []
        batch.append((number, cells))
    if batch:
        yield section(final=True)
    elif header is not None:  # a header row alone is still the sheet's text
        yield heading(1, name) + "\n\n" + pipe_table(header, [])
