"""HTML pages to Markdown text for the splitter: a page's main content through trafilatura
(Barbaresi, "Trafilatura: A Web Scraping Library and Command-Line Tool for Text Discovery and
Extraction", ACL 2021), and a whole page through the standard library's ``HTMLParser`` where
trafilatura cannot serve (short pages, pages nested past libxml2's limits, parser failures).
Both keep the structure the splitter cuts by: ``#`` headings, lists, table rows, fenced code.

    html_to_markdown(page)   # main content only, or None when the page has none
    html_to_text(page)       # the whole page's text, no chrome that is not text

Pure (no Beam); ``chunkline.readers`` decodes the bytes and calls these.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

from chunkline.extras import require

# Pages with less visible text than this are converted whole by html_to_text. It is trafilatura's
# own MIN_EXTRACTED_SIZE: below it, trafilatura's cascade replaces its structured extraction with
# a structure-less dump of the page (core.trafilatura_sequence, stage 3 "baseline rescue"), so a
# small page would lose its headings, lists and code fences; and a page that small has no chrome
# worth separating from its content.
SHORT_PAGE_CHARS = 250
_TRAFILATURA_OPTIONS: dict[str, Any] = {
    "output_format": "markdown",
    "include_formatting": True,  # headings as "#" lines, code as fences, emphasis kept
    "include_tables": True,  # pipe tables
    "include_comments": False,  # reader comments are not the page's content
    "include_links": False,  # link text stays, targets go: URLs are noise to an embedder
    "include_images": False,
    # trafilatura's dedup keeps a process-wide LRU: results would depend on what else the worker
    # read; duplicates are the dedupe stage's job.
    "deduplicate": False,
    "with_metadata": False,
    # Precision skips the cascade's "baseline rescue", which on a page of navigation, footer and
    # cookie banner only would return that chrome as the content; with it such a page has no
    # main content and is rejected. On examples/corpus/site the output is identical to the
    # default focus.
    "favor_precision": True,
}


def html_to_markdown(html: str) -> str | None:
    """The main content of an HTML page as Markdown (``#`` headings, pipe tables, fenced code),
    without navigation, headers, footers and cookie banners; None when the page has no main
    content. Never raises.

    Extraction is trafilatura's (Barbaresi 2021); a page with under :data:`SHORT_PAGE_CHARS` of
    visible text is converted whole by :func:`html_to_text` instead (see there why), and so is a
    page trafilatura's parser raises on or cannot read whole (nested deeper than libxml2's limit).
    """
    return main_content(html, html_to_text(html))


def main_content(html: str, plain: str) -> str | None:
    """:func:`html_to_markdown` of a page whose :func:`html_to_text` is already known
    (``plain``), so a reader that looks at the whole text first converts the page once."""
    if not plain.strip():
        return None
    if len(plain) < SHORT_PAGE_CHARS:
        return plain
    # trafilatura parses with lxml's HTMLParser without huge_tree (trafilatura.utils.HTML_PARSER),
    # and libxml2 (2.14) then stops at element depth 256 ("Excessive depth in document: 256, use
    # XML_PARSE_HUGE option", an ERR_RESOURCE_LIMIT error) and drops everything deeper, text
    # included. trafilatura then returns nothing, or only the shallow part (an intro paragraph
    # kept, the article 300 elements down lost), so such a page keeps its whole text instead.
    trafilatura = require("html", "trafilatura")  # heavy (lxml, justext, htmldate): only where HTML is read
    if _over_libxml2_limits(html):
        return plain

    try:
        extracted = trafilatura.extract(html, **_TRAFILATURA_OPTIONS)
    except Exception:  # noqa: BLE001 - lxml raises many types on hostile markup; never fail a read
        return plain
    return extracted if extracted and extracted.strip() else None


# WHATWG HTML: the root element's lang attribute is the page's language (a BCP 47 tag).
_LANG_SCAN_CHARS = 4096  # the root element opens within the page's first bytes
_HTML_LANG = re.compile(r"<html\b[^>]*?\blang\s*=\s*[\"']?([A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*)", re.I)
PAGE_METADATA_KEYS = ("title", "author", "date", "url", "language")


def page_metadata(html: str) -> dict[str, str]:
    """What a page says about itself: ``title``, ``author``, ``date`` (ISO 8601), ``url`` (the
    canonical or og:url), from trafilatura's metadata extraction (its ``extensive`` date search
    off: markup only, no guessing from prose), and ``language`` from ``<html lang>``. Keys
    without a value are left out. Never raises."""
    found: dict[str, str] = {}
    language = _HTML_LANG.search(html[:_LANG_SCAN_CHARS])
    if language:
        found["language"] = language.group(1)
    extract_metadata = require("html", "trafilatura").extract_metadata
    if _over_libxml2_limits(html):
        return found

    try:
        extracted = extract_metadata(html, extensive=False)
    except Exception:  # noqa: BLE001 - lxml raises many types on hostile markup; never fail a read
        return found
    for key in ("title", "author", "date", "url"):
        value = getattr(extracted, key, None)
        if isinstance(value, str) and value.strip():
            found[key] = value.strip()
    return found



def _over_libxml2_limits(html: str) -> bool:
    """Whether libxml2's HTML parser, as trafilatura runs it, hits one of its resource limits."""
    from lxml import etree, html as lxml_html

    parser = lxml_html.HTMLParser(encoding="utf-8")
    try:
        lxml_html.document_fromstring(html.encode("utf-8", "surrogatepass"), parser=parser)
    except Exception:  # noqa: BLE001 - the parser's own errors are in its log
        pass
    limit = etree.ErrorTypes.ERR_RESOURCE_LIMIT
    return any(error.type == limit for error in parser.error_log)


# Structural converter for short pages (and trafilatura failures): enough structure for the
# splitter (paragraphs, headings as Markdown lines, code kept verbatim), none of the page chrome
# that is not text.
_SKIPPED_ELEMENTS = frozenset({"script", "style", "head", "noscript", "template"})
_HEAD_ELEMENTS = frozenset({"title", "meta", "link", "style", "script", "base", "noscript", "template"})
_HEADING_LEVELS = {f"h{level}": level for level in range(1, 7)}
_BLOCK_ELEMENTS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "dialog",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hgroup",
    "hr", "html", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody",
    "tfoot", "thead", "tr", "ul",
}) | frozenset(_HEADING_LEVELS)
_TABLE_CELLS = frozenset({"td", "th"})


class _BlockParser(HTMLParser):
    """Collects a page's blocks of text (paragraphs, headings, list items, table rows, ``<pre>``
    code) in order; ``convert_charrefs`` unescapes entities in the data it sees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str]] = []  # (kind, text); kind: p, li, row, h, pre
        self._pending_text: list[str | None] = []  # text, and None where a <br> breaks the line
        self._skipped_open: list[str] = []  # open skipped elements, innermost last
        self._heading_level = 0
        self._list_item = False
        self._pre_depth = 0
        self._row_has_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipped_open == ["head"] and tag not in _HEAD_ELEMENTS:
            self._skipped_open.clear()  # </head> may be omitted: body content closes it
        if tag in _SKIPPED_ELEMENTS:
            self._skipped_open.append(tag)
        if self._skipped_open:
            return
        if tag == "br":
            self._pending_text.append(None)
        elif tag in _TABLE_CELLS:
            if self._row_has_cell:
                self._pending_text.append(" | ")
            self._row_has_cell = True
        elif tag in _BLOCK_ELEMENTS:
            self._flush()
            if tag in _HEADING_LEVELS:
                self._heading_level = _HEADING_LEVELS[tag]
            elif tag == "li":
                self._list_item = True
            elif tag == "pre":
                self._pre_depth += 1
            elif tag == "tr":
                self._row_has_cell = False

    def handle_endtag(self, tag: str) -> None:
        if tag in self._skipped_open:
            while self._skipped_open.pop() != tag:
                pass  # an unclosed element inside the skipped one ends with it
            return
        if self._skipped_open or tag not in _BLOCK_ELEMENTS:
            return
        self._flush()
        if tag in _HEADING_LEVELS:
            self._heading_level = 0
        elif tag == "li":
            self._list_item = False
        elif tag == "pre":
            self._pre_depth = max(0, self._pre_depth - 1)
        elif tag == "tr":
            self._row_has_cell = False

    def handle_data(self, data: str) -> None:
        if not self._skipped_open:
            self._pending_text.append(data)

    def close(self) -> None:
        super().close()
        self._flush()

    def _flush(self) -> None:
        """Ends the block being collected: its pending text becomes one entry of ``blocks``."""
        parts, self._pending_text = self._pending_text, []
        if self._pre_depth:
            code = "".join("\n" if part is None else part for part in parts).strip("\r\n")
            if code.strip():
                self.blocks.append(("pre", code))
            return
        # Outside <pre> a source newline is only a space; a line ends only at a <br>.
        lines: list[list[str]] = [[]]
        for part in parts:
            if part is None:
                lines.append([])
            else:
                lines[-1].append(part)
        text = "\n".join(filter(None, (" ".join("".join(line).split()) for line in lines)))
        if not text:
            return
        if self._heading_level:
            self.blocks.append(("h", "#" * self._heading_level + " " + " ".join(text.split())))
        elif self._list_item:
            self.blocks.append(("li", "- " + text))
            self._list_item = False  # only the item's first block carries the bullet
        elif self._row_has_cell:
            self.blocks.append(("row", text))
        else:
            self.blocks.append(("p", text))


def html_to_text(html: str) -> str:
    """Readable text of an HTML page: blocks separated by blank lines, ``<h1>``-``<h6>`` as
    Markdown ``#`` lines (so the splitter sees the headings), ``<pre>`` in a code fence,
    ``<script>``/``<style>``/``<head>`` dropped, entities unescaped. Never raises.

    >>> html_to_text("<h2>Setup</h2><p>Run &amp; wait.</p>")
    '## Setup\\n\\nRun & wait.'
    """
    parser = _BlockParser()
    parser.feed(html)
    parser.close()
    return "".join(_join_blocks(parser.blocks))


def _join_blocks(blocks: list[tuple[str, str]]) -> Iterator[str]:
    """The blocks as Markdown pieces: separated by blank lines, ``<pre>`` blocks fenced."""
    previous = ""
    for kind, text in blocks:
        if previous:
            # Items of one list and rows of one table stay on consecutive lines.
            yield "\n" if kind == previous and kind in ("li", "row") else "\n\n"
        if kind == "pre":
            # A fence keeps "# comment" lines in code from reading as headings.
            longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
            fence = "`" * max(3, longest + 1)
            text = f"{fence}\n{text}\n{fence}"
        yield text
        previous = kind
