"""The formats a reader takes, by file extension, what their documents record as ``format``, and
the reasons shared by every format's rejections."""

from __future__ import annotations

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
# ``tabular`` (CSV, TSV), ``ebook`` (EPUB), ``mail`` (one message, or an mbox of them),
# ``notebook`` (Jupyter), ``rst`` (reStructuredText through docutils).
WORD_EXTENSIONS = frozenset({".docx", ".docm"})
SLIDE_EXTENSIONS = frozenset({".pptx", ".pptm"})
SHEET_EXTENSIONS = frozenset({".xlsx", ".xlsm"})
DELIMITED_EXTENSIONS = frozenset({".csv", ".tsv"})
EPUB_EXTENSIONS = frozenset({".epub"})
MAIL_EXTENSIONS = frozenset({".eml"})
MBOX_EXTENSIONS = frozenset({".mbox"})
NOTEBOOK_EXTENSIONS = frozenset({".ipynb"})
RST_EXTENSIONS = frozenset({".rst"})
STRUCTURED_EXTENSIONS = (WORD_EXTENSIONS | SLIDE_EXTENSIONS | SHEET_EXTENSIONS
                         | DELIMITED_EXTENSIONS | EPUB_EXTENSIONS | MAIL_EXTENSIONS
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
    **{ext: "xlsx" for ext in SHEET_EXTENSIONS}, ".csv": "csv", ".tsv": "tsv", ".epub": "epub",
    ".eml": "email", ".mbox": "email", ".ipynb": "notebook", ".rst": "rst",
}
# Formats whose text is Markdown and that have pages: a deck's slides. A PDF's pages hold
# PDFium's plain text (its headings are its outline), so the split stage reads a paged
# document as Markdown only when its format is one of these.
PAGED_MARKDOWN_FORMATS = frozenset({"pptx"})

EMPTY = "empty document"
BINARY = "binary file"
NO_MAIN_CONTENT = "no main content"


def over_limit(size: int, options: ReadOptions) -> str | None:
    limit = options.max_document_bytes
    if limit is not None and size > limit:
        return f"document is {size} bytes, over the limit of {limit}"
    return None

