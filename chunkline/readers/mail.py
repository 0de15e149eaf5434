"""E-mail (RFC 5322 messages with MIME parts, ``.eml``; and mbox files of them) to Markdown,
with the standard library's ``email`` package (``policy.default``: RFC-compliant header
decoding, ``get_body``, ``iter_attachments``).

A message's text is its subject as a heading, then its body: the ``text/plain`` part, else the
``text/html`` part through ``chunkline.html_markdown`` (main content, else the whole page's
text). Subject, sender, recipients, date (ISO 8601) and Message-ID are its metadata. Each
attachment is handed back with its bytes, for the caller to read as a file of its own under the
id ``<message id>//<file name>`` (the member-id convention of ``chunkline.containers``); a
forwarded message (``message/rfc822``) is an attachment named ``<n>.eml``.

An mbox file (the ``From `` line before each message, RFC 4155) is cut into its messages, read
as ``<mbox id>//<n>.eml`` (1-based, in file order). Lines escaped as ``>From `` in the body stay
as written (mboxrd and mboxo differ on unescaping them, and the text is the same either way).
"""

from __future__ import annotations

import email
import mimetypes
import re
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage, MIMEPart
from email.utils import parsedate_to_datetime
from typing import Any, Iterator

from chunkline.html_markdown import html_to_text, main_content
from chunkline.readers.formats import EMPTY
from chunkline.readers.markdown import blocks, heading
from chunkline.readers.office import Converted
from chunkline.readers.text import decode_text

_MBOX_FROM = re.compile(rb"^From [^\r\n]*\r?\n", re.M)
_UNSAFE_NAME = re.compile(r"[\x00-\x1f/\\]")


@dataclass(frozen=True)
class Attachment:
    """An attachment: its member name (a file name without any directory, unique within the
    message) and its decoded bytes, or why they could not be had."""

    name: str
    data: bytes | None
    reason: str | None = None


@dataclass(frozen=True)
class Message:
    """One message read: its text and metadata (or the reason it has none), and its
    attachments."""

    converted: Converted | str
    attachments: tuple[Attachment, ...] = ()


def _header(message: EmailMessage, name: str) -> str:
    try:
        value = message.get(name)
    except Exception:  # noqa: BLE001 - a malformed header raises in the policy's parser
        return ""
    return " ".join(str(value).split()) if value is not None else ""


def _metadata(message: EmailMessage) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, key in (("Subject", "subject"), ("From", "from"), ("To", "to"), ("Cc", "cc"),
                      ("Message-ID", "message_id")):
        value = _header(message, name)
        if value:
            found[key] = value
    date = _header(message, "Date")
    if date:
        try:
            found["date"] = parsedate_to_datetime(date).isoformat()
        except (TypeError, ValueError, IndexError):
            found["date"] = date  # as written: an unparsable date is still what it says
    return found


class _Undecodable(Exception):
    """The body part's bytes are no text in its declared charset nor in any other found with
    confidence: the reason is the message."""


def _body_text(message: EmailMessage) -> str:
    """The message's body as text (``text/plain``, else ``text/html`` as its main content); ""
    when it has none. Raises :class:`_Undecodable`."""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    content = _part_text(part)
    if part.get_content_subtype() == "html":
        plain = html_to_text(content)
        return main_content(content, plain) or plain
    return content.replace("\r\n", "\n").strip("\n")


def _part_text(part: MIMEPart) -> str:
    """A text part's bytes (its transfer encoding undone) read in its declared charset, strictly.

    The ``charset`` parameter names the part's encoding (RFC 2046, 4.1.2), US-ASCII where there
    is none (RFC 2045, 5.2); but mailers declare ``utf-8`` over cp1252 bytes, and the email
    package's ``get_content`` then swaps each bad byte for U+FFFD. Bytes that do not decode as
    declared, or a charset Python does not know, are read as a file's bytes are
    (:func:`chunkline.readers.text.decode_text`: a BOM, UTF-8, then detection used only when
    confident), so a body is read right or refused, never indexed as replacement characters."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):  # None for a multipart
        payload = b""
    declared = part.get_content_charset()
    try:
        return payload.decode(declared or "us-ascii")
    except (LookupError, UnicodeError):
        pass  # not the declared charset: the bytes decide, as for a file
    decoded = decode_text(payload, html=part.get_content_subtype() == "html")
    if isinstance(decoded, str):
        label = f"its declared charset {declared}" if declared else "US-ASCII (no charset declared)"
        raise _Undecodable(f"message body does not decode as {label}: {decoded}")
    return decoded[0]


def _attachments(message: EmailMessage) -> Iterator[Attachment]:
    seen: set[str] = set()
    for index, part in enumerate(message.iter_attachments(), start=1):
        kind = part.get_content_type()
        name = part.get_filename() or ""
        name = _UNSAFE_NAME.sub("_", name.rsplit("/", 1)[-1].rsplit("\\", 1)[-1]).strip(" .")
        if not name:
            extension = ".eml" if kind == "message/rfc822" else (mimetypes.guess_extension(kind) or "")
            name = f"{index}{extension}"
        if name in seen:  # two attachments of one name: the later ones numbered
            name = f"{index}-{name}"
        seen.add(name)
        try:
            if kind == "message/rfc822":
                inner = part.get_payload()
                inner = inner[0] if isinstance(inner, list) and inner else inner
                data = inner.as_bytes(policy=policy.default) if hasattr(inner, "as_bytes") else b""
            else:
                data = part.get_payload(decode=True) or b""
        except Exception as exc:  # noqa: BLE001 - bad transfer encoding, a broken inner message
            yield Attachment(name, None, f"unreadable attachment ({type(exc).__name__}: {exc})")
            continue
        yield Attachment(name, data)


def read_message(data: bytes) -> Message:
    """One message's text, metadata and attachments. Never raises: a message whose parts cannot
    be read has a reason in place of its text."""
    try:
        message = email.message_from_bytes(data, policy=policy.default)
        metadata = _metadata(message)
        attachments = tuple(_attachments(message))
        body = _body_text(message)
    except _Undecodable as exc:
        return Message(str(exc), attachments)
    except Exception as exc:  # noqa: BLE001 - the parser is lenient; its accessors are not
        return Message(f"not a readable e-mail message ({type(exc).__name__}: {exc})")
    if not metadata and not body.strip():
        return Message("not an e-mail message (no header and no text)", attachments)
    subject = metadata.get("subject", "")
    text = blocks([heading(1, subject) if subject else "", body])
    if not body.strip():
        return Message(f"{EMPTY} (the message has no text body)", attachments)
    return Message(Converted(text, metadata), attachments)


def mbox_messages(data: bytes) -> list[bytes]:
    """The messages of an mbox file (each without its ``From `` line), in file order; [] for a
    file that does not begin with one."""
    # RFC 4155: a "From " line after a blank line (or at the start) begins a message; one
    # inside a paragraph of a body that was not escaped stays in that body.
    starts = [match for match in _MBOX_FROM.finditer(data)
              if match.start() == 0 or data.endswith((b"\n\n", b"\r\n\r\n"), 0, match.start())]
    if not starts or data[:starts[0].start()].strip():
        return []
    ends = [match.start() for match in starts[1:]] + [len(data)]
    return [data[start.end():end] for start, end in zip(starts, ends)]
