"""The formats a reader takes, by file extension, what their documents record as ``format``, and
the reasons shared by every format's rejections."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chunkline.readers.options import ReadOptions

TEXT_EXTENSIONS = frozenset({".txt", ".md", ".markdown"})
# Source code is read as text, verbatim; the extension stays in the uri and the doc_id.
CODE_EXTENSIONS = frozenset({".py", ".js", ".mjs", ".ts", ".tsx", ".go", ".java", ".rs"})
HTML_EXTENSIONS = frozenset({".html", ".htm"})
JSONL_EXTENSIONS = frozenset({".jsonl"})
PARQUET_EXTENSIONS = frozenset({".parquet"})
PDF_EXTENSIONS = frozenset({".pdf"})
# Images of pages (a scanner's output), read by OCR (chunkline.ocr); a TIFF may hold pages.
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff"})
# Structured formats, each read to Markdown (headings, pipe tables, lists, fenced code) by its
# own module: ``office`` (Word, PowerPoint, Excel; a macro-enabled file for its text only),
# ``opendocument`` (their OpenDocument counterparts: text, presentation, spreadsheet),
# ``tabular`` (CSV, TSV), ``ebook`` (EPUB), ``mail`` (one message, or an mbox of them),
# ``notebook`` (Jupyter), ``rst`` (reStructuredText through docutils).
WORD_EXTENSIONS = frozenset({".docx", ".docm"})
SLIDE_EXTENSIONS = frozenset({".pptx", ".pptm"})
SHEET_EXTENSIONS = frozenset({".xlsx", ".xlsm"})
ODT_EXTENSIONS = frozenset({".odt"})
ODP_EXTENSIONS = frozenset({".odp"})
ODS_EXTENSIONS = frozenset({".ods"})
OPENDOCUMENT_EXTENSIONS = ODT_EXTENSIONS | ODP_EXTENSIONS | ODS_EXTENSIONS
DELIMITED_EXTENSIONS = frozenset({".csv", ".tsv"})
EPUB_EXTENSIONS = frozenset({".epub"})
MAIL_EXTENSIONS = frozenset({".eml"})
MBOX_EXTENSIONS = frozenset({".mbox"})
NOTEBOOK_EXTENSIONS = frozenset({".ipynb"})
RST_EXTENSIONS = frozenset({".rst"})
STRUCTURED_EXTENSIONS = (WORD_EXTENSIONS | SLIDE_EXTENSIONS | SHEET_EXTENSIONS
                         | OPENDOCUMENT_EXTENSIONS | DELIMITED_EXTENSIONS | EPUB_EXTENSIONS | MAIL_EXTENSIONS
                         | MBOX_EXTENSIONS | NOTEBOOK_EXTENSIONS | RST_EXTENSIONS)
# One file, one document: the file's size is the document's size, so an oversized file can be
# rejected from its metadata without reading it. (A PDF's size is mostly fonts and images: its
# limit applies to the text read from it.)
SINGLE_DOCUMENT_EXTENSIONS = TEXT_EXTENSIONS | CODE_EXTENSIONS | HTML_EXTENSIONS
SUPPORTED_EXTENSIONS = (SINGLE_DOCUMENT_EXTENSIONS | JSONL_EXTENSIONS | PARQUET_EXTENSIONS
                        | PDF_EXTENSIONS | IMAGE_EXTENSIONS | STRUCTURED_EXTENSIONS)
# The ``format`` each extension's documents record.
FORMATS = {
    **{ext: "markdown" for ext in (".md", ".markdown")}, ".txt": "text",
    **{ext: "code" for ext in CODE_EXTENSIONS}, **{ext: "html" for ext in HTML_EXTENSIONS},
    ".jsonl": "jsonl", ".parquet": "parquet", ".pdf": "pdf",
    **{ext: "image" for ext in IMAGE_EXTENSIONS},
    **{ext: "docx" for ext in WORD_EXTENSIONS}, **{ext: "pptx" for ext in SLIDE_EXTENSIONS},
    **{ext: "xlsx" for ext in SHEET_EXTENSIONS}, ".odt": "odt", ".odp": "odp", ".ods": "ods",
    ".csv": "csv", ".tsv": "tsv", ".epub": "epub",
    ".eml": "email", ".mbox": "email", ".ipynb": "notebook", ".rst": "rst",
}
# Formats whose text is Markdown and that have pages: a deck's slides (PowerPoint's, OpenDocument's). A PDF's pages hold
# PDFium's plain text (its headings are its outline), so the split stage reads a paged
# document as Markdown only when its format is one of these.
PAGED_MARKDOWN_FORMATS = frozenset({"pptx", "odp"})

# Headings a reader writes itself rather than finds in the document: a slide's notes, the
# footnotes' section, a slide without a title, a long sheet's pieces (``chunkline.readers.tables``).
SPEAKER_NOTES = "Speaker notes"
FOOTNOTES = "Footnotes"
_NAMED_BY_READER = re.compile(r"^(?:Slide \d+|.* \(rows? \d+(?:-\d+)?\))$")


def untitled_slide(number: int) -> str:
    """The heading of slide ``number`` when it has no title."""
    return f"Slide {number}"


def named_by_reader(title: str) -> bool:
    """Whether a heading is one a reader wrote (:data:`SPEAKER_NOTES`, :data:`FOOTNOTES`,
    :func:`untitled_slide`, a sheet's ``Orders (rows 2-501)``), not the document's own.

    >>> [named_by_reader(t) for t in ("Slide 3", "Footnotes", "Orders (rows 2-501)", "Calibration")]
    [True, True, True, False]
    """
    return title in (SPEAKER_NOTES, FOOTNOTES) or _NAMED_BY_READER.match(title) is not None


EMPTY = "empty document"
BINARY = "binary file"
NO_MAIN_CONTENT = "no main content"


def over_limit(size: int, options: ReadOptions) -> str | None:
    limit = options.max_document_bytes
    if limit is not None and size > limit:
        return f"document is {size} bytes, over the limit of {limit}"
    return None

