"""EPUB books (EPUB 3.3, and EPUB 2's OPF and NCX; ebooklib) to Markdown: the content documents
in spine order (the reading order, EPUB 3.3 section 5.4.2.6), each chapter's XHTML through the
whole-page converter of ``chunkline.html_markdown`` (``html_to_text``: headings as ``#`` lines,
lists, ``<pre>`` fenced; a chapter is all content, so no main-content extraction drops part of
it). A chapter that does not open with a heading gets its table-of-contents title as one, so
its opening text has a heading path too. The
package's Dublin Core title, creators, language, date and publisher are the metadata.

Refused with a reason: a file that is not a zip, a book whose declared member sizes pass the
container limits (ebooklib inflates every item in memory), a book whose content documents are
encrypted (DRM, EPUB 3.3 section 4.2.6.3.2; font obfuscation, which only scrambles fonts, is
no obstacle), a damaged package, and a book with no text.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from typing import Any, Iterator

from chunkline.containers import ContainerOptions
from chunkline.html_markdown import html_to_text
from chunkline.readers.formats import EMPTY
from chunkline.readers.markdown import blocks, heading, one_line
from chunkline.readers.office import Converted, unpacked_problem
from chunkline.readers.text import decode_text
from chunkline.extras import require

_ENCRYPTION = "META-INF/encryption.xml"
# Font obfuscation (IDPF, "Font Obfuscation" in EPUB OCF; Adobe's variant): fonts only.
_FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})
_HEADING_LINE = re.compile(r"#{1,6} ")
_DC_KEYS = (("title", "title"), ("creator", "author"), ("language", "language"),
            ("date", "date"), ("publisher", "publisher"))


def read_epub(data: bytes, options: ContainerOptions) -> Converted | str:
    """A book's chapters as Markdown with its metadata, or the reason it has none. Never
    raises."""
    if not data.startswith(b"PK"):
        return "not a readable EPUB (not a zip archive)"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            problem = unpacked_problem(infos, len(data), "EPUB", options)
            if problem is None and any(info.filename == _ENCRYPTION for info in infos):
                problem = _drm(archive.read(_ENCRYPTION))
    except Exception as exc:  # noqa: BLE001 - BadZipFile, a truncated central directory, ...
        return f"not a readable EPUB ({type(exc).__name__}: {exc})"
    if problem:
        return problem
    require("office", "ebooklib")  # raised, not a row's reason: installing the extra fixes every one
    try:
        return _epub(data)
    except Exception as exc:  # noqa: BLE001 - EpubException, KeyError on a missing item, lxml
        return f"not a readable EPUB ({type(exc).__name__}: {exc})"


def _drm(xml: bytes) -> str | None:
    from lxml import etree

    try:
        root = etree.fromstring(xml, etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError as exc:
        return f"not a readable EPUB (META-INF/encryption.xml: {exc})"
    algorithms = {method.get("Algorithm") for method in root.iter("{*}EncryptionMethod")}
    if algorithms - _FONT_OBFUSCATION:
        return "encrypted EPUB (DRM-protected content; not supported)"
    return None


def _toc_titles(entries: Any) -> Iterator[tuple[str, str]]:
    """(href without its fragment, title) of every table-of-contents entry, depth first."""
    from ebooklib import epub

    for entry in entries:
        if isinstance(entry, (tuple, list)) and len(entry) == 2:
            section, children = entry
            if getattr(section, "href", None) and getattr(section, "title", None):
                yield section.href.split("#", 1)[0], section.title
            yield from _toc_titles(children)
        elif isinstance(entry, (epub.Link, epub.EpubHtml)):
            href = getattr(entry, "href", None) or getattr(entry, "file_name", None)
            title = getattr(entry, "title", None)
            if href and title:
                yield href.split("#", 1)[0], title


def _epub(data: bytes) -> Converted | str:
    import ebooklib  # only runs that read books load ebooklib (read_epub required it)
    from ebooklib import epub

    book = epub.read_epub(io.BytesIO(data), {"ignore_ncx": False})
    titles: dict[str, str] = {}
    for href, title in _toc_titles(book.toc):
        titles.setdefault(posixpath.normpath(href), one_line(title))
    chapters: list[str] = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT or isinstance(item, epub.EpubNav):
            continue
        decoded = decode_text(item.get_content(), html=True)
        if isinstance(decoded, str):
            continue  # not text (an image in the spine): nothing to read in it
        text = html_to_text(decoded[0])
        if not text.strip():
            continue
        chapter = titles.get(posixpath.normpath(item.get_name()))
        if chapter and not _HEADING_LINE.match(text):  # its opening text belongs under a title
            text = heading(1, chapter) + "\n\n" + text
        chapters.append(text)
    body = blocks(chapters)
    if not body.strip():
        return f"{EMPTY} (no text in the book's {len(book.spine)} spine item(s))"
    metadata: dict[str, Any] = {}
    for name, key in _DC_KEYS:
        values = [one_line(value) for value, _attrs in book.get_metadata("DC", name)
                  if isinstance(value, str) and value.strip()]
        if values:
            metadata[key] = ", ".join(values) if key == "author" else values[0]
    return Converted(body, metadata)
