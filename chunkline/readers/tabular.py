"""CSV and TSV files (RFC 4180; the standard library's ``csv``) to one Markdown section: a
heading named after the file, then its rows as a pipe table whose first row is the header
(``chunkline.readers.tables``: a file of more than ``max_rows`` rows is cut into sections, each
with the header again).

The bytes are decoded as any text file (``chunkline.readers.text.decode_text``: BOM, UTF-8,
detection past a confidence bar). A ``.tsv`` is split on tabs; a ``.csv`` on commas, or on
semicolons where its first line holds more semicolons than commas (what spreadsheets write in
locales whose decimal separator is the comma). Row numbers count records, the header row 1.
"""

from __future__ import annotations

import csv
import re
from typing import Iterator

from chunkline.readers.formats import EMPTY
from chunkline.readers.office import Converted
from chunkline.readers.tables import sheet_sections


def delimiter_of(text: str, tab: bool) -> str:
    """The field separator: a tab for TSV; for CSV a semicolon when the first line holds more of
    them than commas, else a comma.

    >>> delimiter_of("a;b;c\\n1,5;2;3", False), delimiter_of("a,b\\n", False)
    (';', ',')
    """
    if tab:
        return "\t"
    first = text.split("\n", 1)[0]
    return ";" if first.count(";") > first.count(",") else ","


# A line with its line break, as ``io.StringIO(text, newline="")`` reads lines (``\n``, ``\r\n``
# or a lone ``\r``, kept as written): what ``csv`` needs to read quoted line breaks.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def lines_of(text: str) -> Iterator[str]:
    """The lines of ``text`` one at a time, line breaks kept. Not ``io.StringIO``, which copies
    the whole text into a buffer of 4 bytes a character before reading the first line (16 MB
    for a 4 MB CSV).

    >>> list(lines_of('a,"x\\r\\ny"\\rb\\n\\nc'))
    ['a,"x\\r\\n', 'y"\\r', 'b\\n', '\\n', 'c']
    """
    for match in _LINE.finditer(text):
        yield match.group()


def read_delimited(text: str, name: str, tab: bool, max_rows: int) -> Converted | str:
    """A decoded CSV/TSV file as a Markdown section named ``name``, or the reason it has none
    (no non-empty row, or a row ``csv`` cannot parse). Never raises."""
    reader = csv.reader(lines_of(text), delimiter=delimiter_of(text, tab))
    try:
        sections = list(sheet_sections(name, enumerate(reader, start=1), max_rows))
    except csv.Error as exc:
        return f"not a readable {'TSV' if tab else 'CSV'} file (line {reader.line_num}: {exc})"
    if not sections:
        return f"{EMPTY} (no row holds a value)"
    return Converted("\n\n".join(sections))
