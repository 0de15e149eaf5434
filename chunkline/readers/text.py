"""Bytes to text: BOMs, declared charsets, UTF-8, charset-normalizer past a confidence bar, and
the binary sniff."""

from __future__ import annotations

import codecs
import re

from chunkline.readers.formats import BINARY
from chunkline.extras import require

# The binary sniff looks where file(1) and Perl's -B look: the first block.
SNIFF_BYTES = 8192
_MAX_CONTROL_RATIO = 0.30
# C0 controls that do occur in text (tab, newlines, form feed, backspace, ESC of ANSI logs).
_TEXT_CONTROLS = frozenset(b"\t\n\v\f\r\x08\x1b")
_CONTROL_BYTES = frozenset(b for b in range(0x20) if b not in _TEXT_CONTROLS) | {0x7F}
_CONTROL_DELETE = bytes(sorted(_CONTROL_BYTES))


def looks_binary(data: bytes) -> bool:
    """NUL in the first block, or more than 30% of it control bytes that text does not use."""
    sample = data[:SNIFF_BYTES]
    if b"\x00" in sample:
        return True
    # Counted in C: the bytes left once every control byte is deleted.
    controls = len(sample) - len(sample.translate(None, _CONTROL_DELETE))
    return controls > _MAX_CONTROL_RATIO * len(sample)


def decode_utf8(data: bytes, offset: int = 0) -> tuple[str, str | None]:
    """(text, None), or ("", reason) naming the first bad byte (counted from ``offset``, in
    the bytes as given, BOM included). A leading UTF-8 BOM is dropped, not an error."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return "", f"not valid UTF-8 at byte {offset + skip + exc.start}"


# Longest first: the UTF-32 LE BOM (FF FE 00 00) begins with the UTF-16 LE one (FF FE). Python's
# "utf-16"/"utf-32" codecs read the byte order from the BOM and drop it.
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# WHATWG HTML "prescan a byte stream to determine its encoding" reads at most the first 1024 bytes.
_PRESCAN_BYTES = 1024
_HTML_COMMENT = re.compile(rb"<!--.*?(?:-->|$)", re.S)
_META_TAG = re.compile(rb"<meta[\s/][^>]*>?", re.I)
# One pattern for both forms: <meta charset=X> and the "...; charset=X" inside the content of
# <meta http-equiv="Content-Type">. Labels are letters, digits and "-_.:" (WHATWG Encoding).
_CHARSET_PARAMETER = re.compile(rb"""(?:^|[\s/;"'])charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_XML_DECLARATION = re.compile(
    rb"""^\s*<\?xml[^>]*?\sencoding\s*=\s*["']([A-Za-z0-9._:-]+)["']""", re.I)
# The decoders a declared label gets, after WHATWG Encoding's label table: "iso-8859-1", "ascii"
# and "latin1" are labels of windows-1252, "iso-8859-9" of windows-1254, "gb2312" of GBK (whose
# decoder is gb18030's), and the Shift_JIS, EUC-KR and Big5 decoders are the vendors' supersets
# (cp932, cp949, Big5-HKSCS). Python's strict codecs are tried in order, so an ordinary page is
# read with the codec it names and only a page using the extensions gets the superset.
_DECLARED_DECODERS = {
    "iso8859-1": ("cp1252", "latin-1"),
    "ascii": ("cp1252", "latin-1"),
    "iso8859-9": ("cp1254", "iso8859-9"),
    "gb2312": ("gbk", "gb18030"),
    "gbk": ("gbk", "gb18030"),
    "shift_jis": ("shift_jis", "cp932"),
    "euc_kr": ("euc_kr", "cp949"),
    "big5": ("big5", "big5hkscs"),
}
# Detection's confidence bar (charset-normalizer: ``chaos`` is its mess ratio of a decoding, 0 to
# 1). A detection is used only when every candidate within this margin of the best reads the
# bytes as the same text. Measured with charset-normalizer 3.5 on French cp1252 prose: its best
# guess is cp1257 ("trčs bien", chaos 0.027) ahead of cp1252 (0.045); a long Russian cp1251 text
# has cp1251 at 0.0 and the next (mac_greek) above 0.1; a short one ties cp1251, cp1253 and
# mac_cyrillic at 0.0. The margin rejects the first and third and keeps the second.
_DETECTION_MARGIN = 0.05


def decode_text(data: bytes, *, html: bool = False) -> tuple[str, str] | str:
    """A text file's bytes -> ``(text, encoding)``, or the reason they are not text.

    ``encoding`` is the Python codec used, normalised (:func:`codec_name`): "utf-8", "utf-16",
    "utf-32", "windows-1251", "shift_jis"... The order (a later step runs only when the earlier
    ones did not decide):

    1. A BOM (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE; the Unicode Standard, section 23.8) decides, and
       is dropped; it is looked for before the binary sniff because UTF-16 text is full of NULs.
       Text that decodes to NULs or mostly controls is still a binary file.
    2. Bytes with a NUL or mostly control bytes in the first block are a binary file (a PNG
       named .txt stays one: no detector ever sees it).
    3. HTML only: the charset its head declares, as WHATWG's prescan finds it (``<meta
       charset>``, ``<meta http-equiv="Content-Type" content="...; charset=...">``, in the first
       1024 bytes), else an XML declaration's ``encoding``. A label Python does not know, or one
       the bytes do not decode under, is passed over.
    4. UTF-8, strictly.
    5. Detection by charset-normalizer, used only past a confidence bar: every candidate about
       as good as the best must read the same text (see ``_DETECTION_MARGIN``). Too little
       evidence (a few accented letters) stays undecided: the reason is then the UTF-8 error.
    """
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return decode_with_bom(data, encoding)
    if looks_binary(data):
        return BINARY
    if html:
        for encoding in _declared_decoders(data):
            try:
                return data.decode(encoding), codec_name(encoding)
            except UnicodeError:  # the bytes do not decode under the label: not a declaration
                continue
    text, error = decode_utf8(data)
    if error is None:
        return text, "utf-8"
    detected = _detect_encoding(data)
    if detected is None:
        return f"{error} (and no other encoding detected with confidence)"
    if _looks_binary_text(detected[0]):
        return BINARY
    return detected


def codec_name(encoding: str) -> str:
    """A codec's canonical Python name, with Windows code pages spelled as WHATWG and IANA do
    ("cp1251" -> "windows-1251"); a name ``bytes.decode`` accepts either way.

    >>> codec_name("CP1251"), codec_name("utf_16_le"), codec_name("sjis")
    ('windows-1251', 'utf-16-le', 'shift_jis')
    """
    name = codecs.lookup(encoding).name
    windows = "windows-" + name[2:] if re.fullmatch(r"cp12[5-9][0-9]", name) else None
    return windows if windows and _is_known_codec(windows) else name


def _is_known_codec(encoding: str) -> bool:
    try:
        codecs.lookup(encoding)
    except LookupError:
        return False
    return True


def decode_with_bom(data: bytes, encoding: str) -> tuple[str, str] | str:
    if encoding == "utf-8":
        text, error = decode_utf8(data)
        if error is not None:
            return error
    else:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            return f"not valid {encoding.upper()} at byte {exc.start}"
    if _looks_binary_text(text):
        return BINARY
    return text, encoding


def _looks_binary_text(text: str) -> bool:
    """:func:`looks_binary` on decoded text (a binary file may begin with BOM-like bytes)."""
    sample = text[:SNIFF_BYTES]
    if "\x00" in sample:
        return True
    controls = sum(1 for char in sample if ord(char) in _CONTROL_BYTES)
    return controls > _MAX_CONTROL_RATIO * len(sample)


# The encodings of the WHATWG Encoding Standard, as Python names them (codecs.lookup(...).name;
# windows-874 is cp874, x-mac-cyrillic mac-cyrillic). A page may declare only these: Python
# also knows codecs that are not text encodings of the web (base64, rot13, zlib, punycode,
# unicode_escape, EBCDIC cp037), which would fail the job or decode ASCII into mojibake.
_WHATWG_CODECS = frozenset({
    "utf-8", "cp866", "iso8859-1", "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5",
    "iso8859-6", "iso8859-7", "iso8859-8", "iso8859-9", "iso8859-10", "iso8859-11",
    "iso8859-13", "iso8859-14", "iso8859-15", "iso8859-16", "koi8-r", "koi8-u", "mac-roman",
    "cp874", "cp1250", "cp1251", "cp1252", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257",
    "cp1258", "mac-cyrillic", "gbk", "gb2312", "gb18030", "big5", "euc_jp", "iso2022_jp",
    "shift_jis", "euc_kr", "utf-16-be", "utf-16-le", "utf-16", "utf-32", "ascii", "tis-620",
})


def _declared_decoders(data: bytes) -> tuple[str, ...]:
    """The codecs to try for the charset an HTML page declares, most faithful first; () if it
    declares none Python knows."""
    head = _HTML_COMMENT.sub(b"", data[:_PRESCAN_BYTES])
    labels = [
        match.group(1)
        for tag in _META_TAG.finditer(head)
        for match in [_CHARSET_PARAMETER.search(tag.group(0))]
        if match
    ]
    xml = _XML_DECLARATION.match(data[:_PRESCAN_BYTES])
    if xml:
        labels.append(xml.group(1))
    for label in labels:
        try:
            name = codecs.lookup(label.decode("ascii")).name
        except (LookupError, UnicodeDecodeError):
            continue  # WHATWG: an unknown label is no declaration
        if name not in _WHATWG_CODECS:
            continue
        if name.startswith(("utf-16", "utf-32")):
            # WHATWG: a UTF-16 declaration read in ASCII-compatible bytes means UTF-8 (a real
            # UTF-16 page has a BOM, handled before this).
            return ("utf-8",)
        return _DECLARED_DECODERS.get(name, (name,))
    return ()


def _detect_encoding(data: bytes) -> tuple[str, str] | None:
    """(text, encoding) when charset-normalizer is confident as defined above, else None."""
    from_bytes = require("pipeline", "charset_normalizer").from_bytes  # only files that are not UTF-8 pay the import

    matches = list(from_bytes(data))
    if not matches:
        return None
    best = min(matches, key=lambda match: match.chaos)
    contenders = [m for m in matches if m.chaos <= best.chaos + _DETECTION_MARGIN]
    text = str(best)
    if any(str(other) != text for other in contenders):
        return None
    return text, codec_name(best.encoding)


def utf8_encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: no lone surrogate (a JSON ``\\ud800`` escape, or
    a file name's undecodable byte as os.fsdecode escapes it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
