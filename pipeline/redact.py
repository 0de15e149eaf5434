"""Secrets kept out of every message, log line and file a run writes.

A store URI may carry a password (``postgresql://me:secret@db/search``, libpq's
``?password=``), a context server's ``base_url`` a key, a signed URL a token. Whatever leaves
the process (the manifest's ``config`` field, the report built from it, an error message)
goes through :func:`redacted` or :func:`redacted_config` first: the value is replaced by
``***``, the rest stays readable, so the operator still sees which store was meant.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# Query parameters that carry a credential in the URIs users give us: libpq's password,
# OAuth and API tokens, cloud signatures (``X-Goog-Signature``, ``sig`` of Azure SAS).
_SECRET_PARAM = re.compile(
    r"(?P<key>(?:^|[?&;])[^=&#?;]*(?:pass(?:word|wd)?|pwd|token|secret|api[_-]?key|apikey|"
    r"signature|sig|credential|auth)[^=&#?;]*=)(?P<value>[^&#;]*)", re.IGNORECASE)


# A catalog property that carries a credential, in pyiceberg's names: token, credential,
# gcs.oauth2.token, s3.secret-access-key, s3.session-token, adls.account-key, adls.sas-token
# (an access key's id, a Kerberos principal or a keytab's path are not secrets: they stay). The
# value is a secret whatever its key when it is a URI holding one.
_SECRET_PROPERTY = re.compile(r"pass(?:word|wd)?|pwd|token|secret|credential|api[_-]?key|account[_-]?key|"
                              r"signature", re.IGNORECASE)


def secret_property(key: str, value: str) -> bool:
    """Whether the configuration property ``key: value`` holds a secret: its key names a
    credential, or its value is a URI with a password or a credential parameter.

    >>> secret_property("token", "abc"), secret_property("uri", "postgresql://me:pw@db/x")
    (True, True)
    >>> secret_property("uri", "postgresql://me@db/x"), secret_property("s3.region", "eu-west-1")
    (False, False)
    """
    return bool(_SECRET_PROPERTY.search(key)) or ("://" in value and redacted(value) != value)


def redacted(text: str) -> str:
    """``text`` (a URI, or a message holding one) fit for a message or a file: a userinfo
    password (``user:secret@``) and the value of every credential query parameter replaced
    by ``***``.

    >>> redacted("postgresql://me:hunter2@db:5432/search?sslmode=require&password=x")
    'postgresql://me:***@db:5432/search?sslmode=require&password=***'
    """
    out = []
    position = 0
    for match in _SCHEME.finditer(text):
        if match.start() < position:
            continue
        out.append(text[position:match.end()])
        position = match.end()
        end = _uri_end(text, position)
        out.append(_redact_uri_rest(text[position:end]))
        position = end
    out.append(text[position:])
    return "".join(out)


def _uri_end(text: str, start: int) -> int:
    """Where a URI starting at ``start`` ends inside a message: at whitespace or a closing
    quote or bracket."""
    match = re.compile(r"[\s'\"<>()\[\]{}]").search(text, start)
    return match.start() if match else len(text)


def _redact_uri_rest(rest: str) -> str:
    """What follows ``scheme://``: the userinfo's password, then the query's credentials."""
    query_at = rest.find("?")
    head, query = (rest, "") if query_at < 0 else (rest[:query_at], rest[query_at:])
    # The last '@' before the query ends the userinfo: a password holding '/' or '@' (which
    # libpq wants percent-encoded, but people paste) is still masked whole.
    at = head.rfind("@")
    if at >= 0:
        userinfo, host = head[:at], head[at:]
        user, colon, _ = userinfo.partition(":")
        head = (user + ":" + MASK if colon else userinfo) + host
    return head + _SECRET_PARAM.sub(lambda m: m.group("key") + MASK, query)


def redacted_config(value: Any) -> Any:
    """A config as plain data (``chunkline.pipeline.config.to_dict``) with every string redacted: what
    the manifest records."""
    if isinstance(value, str):
        return redacted(value) if "://" in value else value
    if isinstance(value, dict):
        return {key: redacted_config(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted_config(item) for item in value]
    return value
