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
from email.message import EmailMessage
from email.utils import parsedate_to_datetime
from typing import Any, Iterator

from chunkline.html_markdown import html_to_text, main_content
from chunkline.readers.formats import EMPTY
from chunkline.readers.markdown import blocks, heading
from chunkline.readers.office import Converted

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


def _body_text(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except Exception:  # noqa: BLE001 - an unknown charset (LookupError), bad base64, ...
        payload = part.get_payload(decode=True) or b""
        content = payload.decode("utf-8", "replace")
    if not isinstance(content, str):
        return ""
    if part.get_content_subtype() == "html":
        plain = html_to_text(content)
        return main_content(content, plain) or plain
    return content.replace("\r\n", "\n").strip("\n")


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
        body = _body_text(message)
        attachments = tuple(_attachments(message))
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
