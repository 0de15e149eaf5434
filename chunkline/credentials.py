"""Credentials in a document's text: found with a maintained scanner's detectors, then the
document rejected (the reason names each kind and line, never the value), redacted (each
credential replaced by a marker of its kind, page starts kept exact), or indexed as it is.

The detectors are Yelp's detect-secrets plugins (https://github.com/Yelp/detect-secrets),
used as a library: every plugin but the public-IP one (an address is not a credential), each
asked with ``analyze_string`` so that no plugin ever *verifies* a finding against its provider
(detect-secrets' ``analyze_line`` may send the value over the network), then detect-secrets' own
false-positive filters (``detect_secrets.filters.heuristic``, the ``pragma: allowlist secret``
comment). To them come a few token formats detect-secrets 1.5 lacks, each taken from gitleaks'
default rules (https://github.com/gitleaks/gitleaks, ``config/gitleaks.toml``; the rule id is
named beside it), and a connection string's ``Password=``.

The entropy plugins (quoted strings over 4.5 bits per character in base64, 3.0 in hex) are noisy
on real text, where quoted checksums and ids abound; as gitleaks' ``generic-api-key`` does, an
entropy finding counts only on a line that names a credential (``key``, ``token``, ``secret``,
``password``...) and not a digest (``sha256``, ``checksum``...). Documentation examples (AWS's
``...EXAMPLE`` keys, jwt.io's sample token) are allowed, as gitleaks' allow-lists do.

A secret's span is where its value sits on its line, widened over the token characters around
it (a plugin may report only a prefix, as the GitHub one does): a PEM private key runs from its
``BEGIN`` line to its ``END`` line (RFC 7468).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Literal

from chunkline.options import check_fields, help_text

REJECT, REDACT, ALLOW = "reject", "redact", "allow"
ENTROPY_KINDS = frozenset({"Base64 High Entropy String", "Hex High Entropy String"})
# detect-secrets plugins left out: a public IP address is not a credential.
_LEFT_OUT = frozenset({"Public IP (ipv4)"})
# Shown in place of a redacted value; "[" and "]" are not token characters, so a redacted text
# scanned again finds nothing.
MARKER = "[REDACTED {kind}]"


@dataclass(frozen=True)
class CredentialOptions:
    """What becomes of a document holding a credential."""

    mode: Literal["reject", "redact", "allow"] = field(default=REJECT, metadata=help_text(
        "reject: the document is a rejected row naming each credential's kind and line; "
        "redact: each credential is replaced by [REDACTED <kind>] before anything else reads "
        "the text; allow: indexed as it is."))
    entropy: bool = field(default=True, metadata=help_text(
        "Also flag quoted high-entropy strings (detect-secrets' base64 and hex entropy "
        "plugins) on a line that names a credential (key, token, secret, password...)."))

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class Finding:
    """One credential: its kind (the detector's name for it), where it is in the text
    (``start``/``end``, str indices, end-exclusive) and its 1-based line."""

    kind: str
    start: int
    end: int
    line: int
    last_line: int = 0  # where a span over several lines (a private key) ends; 0: ``line``


# -- extra rules --------------------------------------------------------------------------------
# (kind, pattern, group holding the value). From gitleaks' default config unless said otherwise.
_EXTRA_RULES: tuple[tuple[str, str, int, tuple[str, ...]], ...] = (
    # (kind, pattern, group, lowercase literals every match holds: a line without one is skipped)
    ("Google API Key", r"\b(AIza[\w-]{35})(?![\w-])", 1, ("aiza",)),  # gcp-api-key
    ("Google OAuth Client Secret", r"\b(GOCSPX-[\w-]{28})(?![\w-])", 1, ("gocspx-",)),  # gcp-client-secret
    ("Hugging Face Token", r"\b(hf_[a-zA-Z]{34})(?![\w-])", 1, ("hf_",)),  # huggingface-access-token
    ("Anthropic API Key", r"\b(sk-ant-(?:api03|admin01)-[\w-]{93}AA)(?![\w-])", 1, ("sk-ant-",)),  # anthropic-api-key
    # openai-api-key's project, service-account and admin keys; detect-secrets knows the old form.
    ("OpenAI Token", r"\b(sk-(?:proj|svcacct|admin)-[\w-]{40,})(?![\w-])", 1,
     ("sk-proj-", "sk-svcacct-", "sk-admin-")),
    ("npm Token", r"\b(npm_[a-zA-Z0-9]{36})(?![\w-])", 1, ("npm_",)),  # npm-access-token
    ("Shopify Token", r"\b(shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})\b", 1,
     ("shpat_", "shpca_", "shppa_", "shpss_")),  # shopify-*
    ("DigitalOcean Token", r"\b(do[opr]_v1_[a-f0-9]{64})\b", 1, ("_v1_",)),  # digitalocean-*
    ("Databricks Token", r"\b(dapi[a-f0-9]{32}(?:-\d)?)\b", 1, ("dapi",)),  # databricks-api-token
    ("Postman API Key", r"\b(PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34})\b", 1, ("pmak-",)),  # postman-api-token
    ("GitLab Token", r"\b(glpat-[\w-]{20,})(?![\w-])", 1, ("glpat-",)),  # gitlab-pat
    ("Azure AD Client Secret", r"(?:^|[\s'\"`=:(,])([\w~.]{3}\dQ~[\w~.-]{31,34})(?![\w~.-])", 1,
     ("q~",)),  # azure-ad-client-secret
    # ADO.NET / ODBC connection strings ("Server=db;User Id=sa;Password=...;"): the password of
    # a string that also names a server, so a prose "password=" is not taken for one.
    ("Connection String Password",
     r"(?i)\b(?:server|data source|host|addr(?:ess)?)\s*=[^;\n]*;[^\n]*?\b(?:password|pwd)\s*=\s*"
     r"([^;'\"\s\[]{4,})", 1, ("password", "pwd")),
)

# A line naming a credential (gitleaks' generic-api-key keywords), and one naming a digest.
_CREDENTIAL_WORDS = ("access", "api", "auth", "bearer", "client", "cred", "key", "passw", "pwd",
                     "secret", "token", "private", "signature")
# Every word of detect-secrets' keyword denylist (api_?key, db_?pass, password, pwd, secret,
# contraseña...) holds one of these.
_KEYWORD_NEEDLES = ("key", "pass", "pwd", "secret", "contrase")
# Plugins whose patterns are slow over a whole text (a keyword alternation with an empty branch
# before the value), and the lowercase words every one of their patterns holds (read off the
# patterns of detect-secrets 1.5: the key, password or token word, or the service's host).
_PLUGIN_NEEDLES = {
    "IBM Cloud IAM Key": ("key", "pwd", "pass", "token"),
    "IBM COS HMAC Credentials": ("secret",),
    "Cloudant Credentials": ("key", "pw", "pass", "token", ".cloudant.com"),
    "SoftLayer Credentials": ("key", "pwd", "pass", "token", "softlayer"),
    "Mailchimp Access Key": ("-us",),
}
_QUOTES = re.compile(r"[\"'`]")
# Values that stand in for a credential in examples and configs: not one.
_PLACEHOLDERS = frozenset({"password", "passwd", "secret", "changeme", "change_me", "token",
                           "apikey", "api_key", "none", "null", "true", "false", "example",
                           "redacted", "hidden", "masked", "test", "testing", "admin"})
_DIGEST_WORDS = re.compile(r"(?i)sha\d*|md5|hash|checksum|digest|integrity|commit|etag|uuid|"
                           r"fingerprint")
# Values published as examples in providers' documentation (AWS's access key and secret,
# jwt.io's sample token's signature) or placeholders: gitleaks allows them in its rules.
_EXAMPLE = re.compile(r"(?i)example|sample|placeholder|dummy|your[_-]|xxxxx|\*{4}|<[^>]*>|"
                      r"SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
# What a token is made of, for widening a reported value to the whole token.
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-.~")
_PEM_BEGIN = re.compile(r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
_KEY_BODY = re.compile(r"[A-Za-z0-9+/=:\- ]*")
# Specific detectors first: when two find the same span, the more specific names it.
_GENERIC_KINDS = ("Secret Keyword", "Basic Auth Credentials", *sorted(ENTROPY_KINDS))


class Scanner:
    """detect-secrets' plugins and filters, built once (a worker builds one in ``setup``).

    Each detector's patterns are first run over the whole text, in C, to find the lines where
    it could find anything (compiled with ``re.MULTILINE``, so ``^`` and ``$`` still mean a
    line's ends); the detector itself then reads those lines only, as detect-secrets reads a
    file line by line. Most lines of prose meet no pattern at all."""

    def __init__(self, options: CredentialOptions) -> None:
        # Imported here, once per scanner, not per document or line (detect-secrets pulls in
        # requests: a run with `secrets: allow` never imports it).
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.filters import heuristic
        from detect_secrets.plugins.keyword import (
            QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
            REGEX_BY_FILETYPE,
            KeywordDetector,
        )
        from detect_secrets.util.filetype import determine_file_type

        self.heuristic, self.keyword_class = heuristic, KeywordDetector
        self.keyword_regexes = lambda name: REGEX_BY_FILETYPE.get(
            determine_file_type(name or "document.txt"), QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP)
        self.options = options
        self.plugins = [cls() for kind, cls in sorted(get_mapping_from_secret_type_to_class().items())
                        if kind not in _LEFT_OUT and (options.entropy or kind not in ENTROPY_KINDS)]
        self.extra = [(kind, re.compile(pattern), group, needles)
                      for kind, pattern, group, needles in _EXTRA_RULES]
        self.screens = [_multiline(getattr(plugin, "denylist", ())) for plugin in self.plugins]

    def scan(self, text: str, name: str = "") -> list[Finding]:
        """Every credential in ``text`` (``name``: the file's name, which decides how the keyword
        plugin reads assignments), in text order, overlapping spans merged."""
        keyword_regexes = self.keyword_regexes(name)
        line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        # Literal words are found with str.find, in C, far faster than a regex alternation; a
        # text whose lowercase form has another length (a few Unicode letters) is searched
        # with the words as a case-insensitive pattern instead.
        lowered = text.lower()
        if len(lowered) != len(text):
            def lines_with(needles: tuple[str, ...]) -> set[int]:
                pattern = re.compile("|".join(map(re.escape, needles)), re.IGNORECASE)
                return _matching_lines(text, line_starts, [pattern])
        else:
            def lines_with(needles: tuple[str, ...]) -> set[int]:
                return _lines_holding(lowered, line_starts, needles)
        wanted: dict[int, list] = {}  # line index -> detectors to ask
        credential_lines = None
        for plugin, screen in zip(self.plugins, self.screens):
            if plugin.secret_type in ENTROPY_KINDS:
                if credential_lines is None:
                    credential_lines = lines_with(_CREDENTIAL_WORDS)
                lines = credential_lines
            elif isinstance(plugin, self.keyword_class):
                lines = lines_with(_KEYWORD_NEEDLES)
            elif plugin.secret_type in _PLUGIN_NEEDLES:
                lines = lines_with(_PLUGIN_NEEDLES[plugin.secret_type])
            else:
                lines = _matching_lines(text, line_starts, screen)
            for index in lines:
                wanted.setdefault(index, []).append(plugin)
        for rule in self.extra:
            for index in lines_with(rule[3]):
                wanted.setdefault(index, []).append(rule)
        found: list[Finding] = []
        for index in sorted(wanted):
            start = line_starts[index]
            end = line_starts[index + 1] - 1 if index + 1 < len(line_starts) else len(text)
            line = text[start:end]
            for kind, value in self._line_values(line, wanted[index], keyword_regexes):
                for left, right in _spans(line, value):
                    if not _EXAMPLE.search(line[left:right]):  # a documented example, widened
                        found.append(Finding(kind, start + left, start + right, index + 1))
        found = [_whole_private_key(text, f, line_starts) if f.kind == "Private Key" else f
                 for f in found]
        return _merged(found, line_starts)

    def _line_values(self, line: str, detectors: list, keyword_regexes) -> Iterable[tuple[str, str]]:
        heuristic = self.heuristic
        for detector in detectors:
            if isinstance(detector, tuple):  # an extra rule
                kind, pattern, group, _ = detector
                for match in pattern.finditer(line):
                    value = match.group(group)
                    if value and not _EXAMPLE.search(value):
                        yield kind, value
                continue
            plugin, kind = detector, detector.secret_type
            if kind in ENTROPY_KINDS and (_DIGEST_WORDS.search(line) or not _QUOTES.search(line)):
                continue
            if isinstance(plugin, self.keyword_class):
                values = list(plugin.analyze_string(line, denylist_regex_to_group=keyword_regexes))
                if keyword_regexes is not _config_keyword_regexes():
                    # Prose and Markdown hold config snippets too (`export DB_PASSWORD=...`,
                    # `password: ...`): detect-secrets' config-file patterns, where a value
                    # counts only when it looks generated, not like a word of a sentence.
                    values += [value for value in plugin.analyze_string(
                        line, denylist_regex_to_group=_config_keyword_regexes())
                        if _looks_generated(value)]
            else:
                values = plugin.analyze_string(line)
            for value in values:
                if not value or _EXAMPLE.search(value) or value.lower() in _PLACEHOLDERS:
                    continue
                if kind in _WEAK_KINDS and not _plausible_secret(value):
                    continue
                if kind in ENTROPY_KINDS and \
                        plugin.calculate_shannon_entropy(value) <= plugin.entropy_limit:
                    continue
                if (heuristic.is_sequential_string(value) or heuristic.is_potential_uuid(value)
                        or heuristic.is_likely_id_string(value, line, plugin)
                        or heuristic.is_templated_secret(value)
                        or heuristic.is_prefixed_with_dollar_sign(value)
                        or heuristic.is_not_alphanumeric_string(value)
                        or (kind in _GENERIC_KINDS and heuristic.is_indirect_reference(line))):
                    continue
                yield kind, value


# Kinds found by an assignment or a URI's userinfo rather than by a format of their own: their
# value must look like a real secret, or every README's `password="my-password"` is one.
_WEAK_KINDS = frozenset({"Secret Keyword", "Basic Auth Credentials"})
# Substrings of the values documentation writes where a secret would go (gitleaks keeps such
# stopwords for its generic rule).
_STOPWORDS = re.compile(r"(?i)passw|secret|example|sample|changeme|hunter|dummy|placeholder|"
                        r"your|my[-_]?key|api[-_]?key|token|xxxx|test|demo|redacted|fake")
_WORDS = re.compile(r"[a-z]+(?:[-_][a-z0-9]+)+")


def _plausible_secret(value: str) -> bool:
    """A weak kind's value counts when it looks generated (:func:`_looks_generated`) and is
    neither a stand-in word (``Passw0rd``, ``my-password``) nor lowercase words joined by
    dashes (``scram-sha-256``)."""
    return (_looks_generated(value) and not _STOPWORDS.search(value)
            and not _WORDS.fullmatch(value))


@lru_cache(maxsize=1)
def _config_keyword_regexes():
    from detect_secrets.plugins.keyword import REGEX_BY_FILETYPE
    from detect_secrets.util.filetype import FileType

    return REGEX_BY_FILETYPE[FileType.CONFIG]


_DOTTED_NAME = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)+(?:\(\))?")


def _looks_generated(value: str) -> bool:
    """One token at least 8 characters long mixing three character classes (lower, upper, digits,
    symbols), or a 12+ character run of letters and digits: not a word, not a dotted name
    (``settings.SECRET_KEY``), not an environment variable's name."""
    if (len(value) < 8 or any(c.isspace() for c in value) or _DOTTED_NAME.fullmatch(value)
            or re.fullmatch(r"[A-Z_]+", value)):
        return False
    classes = sum((any(c.islower() for c in value), any(c.isupper() for c in value),
                   any(c.isdigit() for c in value), any(not c.isalnum() for c in value)))
    return classes >= 3 or (len(value) >= 12 and any(c.isdigit() for c in value)
                            and any(c.isalpha() for c in value))


def _multiline(patterns: Iterable[re.Pattern]) -> list[re.Pattern]:
    """The patterns as they match within a whole text: ``^`` and ``$`` at each line's ends."""
    return [re.compile(p.pattern, p.flags | re.MULTILINE) for p in patterns]


def _lines_holding(lowered: str, line_starts: list[int], needles: tuple[str, ...]) -> set[int]:
    """Indexes of the lines of ``lowered`` that hold one of ``needles`` (after a find, the search
    goes on from the next line)."""
    lines: set[int] = set()
    for needle in needles:
        at = lowered.find(needle)
        while at >= 0:
            index = bisect.bisect_right(line_starts, at) - 1
            lines.add(index)
            if index + 1 >= len(line_starts):
                break
            at = lowered.find(needle, line_starts[index + 1])
    return lines


def _matching_lines(text: str, line_starts: list[int], patterns: list[re.Pattern]) -> set[int]:
    """Indexes of the lines where some pattern matches, found over the whole text. After a match
    the search goes on from the next line's start, not from the match's end, so a match running
    on past its line never hides one that starts on the next line."""
    lines: set[int] = set()
    for pattern in patterns:
        at = 0
        while at <= len(text):
            match = pattern.search(text, at)
            if match is None:
                break
            index = bisect.bisect_right(line_starts, match.start()) - 1
            lines.add(index)
            if index + 1 >= len(line_starts):
                break
            at = line_starts[index + 1]
    return lines


def _allowlisted(line: str) -> bool:
    return "pragma: allowlist secret" in line


def _spans(line: str, value: str) -> Iterable[tuple[int, int]]:
    """Where ``value`` sits on ``line``, each occurrence widened over the token characters
    around it; nothing on a line that carries detect-secrets' allow-list pragma."""
    if _allowlisted(line):
        return
    at = line.find(value)
    while at >= 0:
        left, right = at, at + len(value)
        while left > 0 and line[left - 1] in _TOKEN_CHARS and line[left - 1] not in "=.":
            left -= 1
        while right < len(line) and line[right] in _TOKEN_CHARS:
            right += 1
        # A sentence's full stop after a token is not part of it.
        while right > at + len(value) and line[right - 1] in ".":
            right -= 1
        yield left, right
        at = line.find(value, at + len(value))


def _whole_private_key(text: str, finding: Finding, line_starts: list[int]) -> Finding:
    """A private key runs from its ``-----BEGIN ... PRIVATE KEY-----`` to the matching ``END``
    line (RFC 7468); without one, over the body lines that follow."""
    line_start = line_starts[finding.line - 1]
    begin = _PEM_BEGIN.search(text, line_start, line_start + 4096)
    start = begin.start() if begin is not None else line_start
    end_match = _PEM_END.search(text, start, start + 64 * 1024)
    if end_match is not None:
        return Finding(finding.kind, start, end_match.end(), finding.line)
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    while end < len(text):  # the base64 body lines of a key whose END is missing
        following = text.find("\n", end + 1)
        following = len(text) if following < 0 else following
        body = text[end + 1:following]
        if not body.strip() or not _KEY_BODY.fullmatch(body):
            break
        end = following
    return Finding(finding.kind, start, end, finding.line)


def _merged(found: list[Finding], line_starts: list[int]) -> list[Finding]:
    """Overlapping findings as one, named by the most specific detector among them."""
    def rank(kind: str) -> int:
        return _GENERIC_KINDS.index(kind) + 1 if kind in _GENERIC_KINDS else 0

    merged: list[Finding] = []
    for finding in sorted(found, key=lambda f: (f.start, -f.end, rank(f.kind), f.kind)):
        if merged and finding.start < merged[-1].end:
            last = merged[-1]
            kind = last.kind if rank(last.kind) <= rank(finding.kind) else finding.kind
            merged[-1] = Finding(kind, last.start, max(last.end, finding.end), last.line)
        else:
            merged.append(finding)
    return [Finding(f.kind, f.start, f.end, bisect.bisect_right(line_starts, f.start),
                    bisect.bisect_right(line_starts, max(f.start, f.end - 1)))
            for f in merged]


@lru_cache(maxsize=4)
def scanner(options: CredentialOptions) -> Scanner:
    """One scanner per process and options (building one imports and instantiates every
    plugin)."""
    return Scanner(options)


def describe(findings: list[Finding], most: int = 5) -> str:
    """Kinds and lines, never values: ``2 credentials: AWS Access Key (line 3), Private Key
    (lines 10-37)``."""
    def place(f: Finding) -> str:
        last = max(f.line, f.last_line)
        return f"line {f.line}" if last == f.line else f"lines {f.line}-{last}"

    shown = [f"{f.kind} ({place(f)})" for f in findings[:most]]
    more = f", and {len(findings) - most} more" if len(findings) > most else ""
    noun = "credential" if len(findings) == 1 else "credentials"
    return f"{len(findings)} {noun}: {', '.join(shown)}{more}"


def redact(text: str, findings: list[Finding],
           page_starts: tuple[int, ...] = ()) -> tuple[str, tuple[int, ...]]:
    """``text`` with each finding replaced by its kind's marker, and the page starts moved with
    the text around them (a page starting inside a redacted span starts at its marker)."""
    pieces, shifts, at = [], [], 0
    for f in findings:
        pieces += [text[at:f.start], MARKER.format(kind=f.kind)]
        shifts.append((f.start, f.end, len(MARKER.format(kind=f.kind))))
        at = f.end
    pieces.append(text[at:])

    def moved(position: int) -> int:
        delta = 0
        for start, end, length in shifts:
            if position >= end:
                delta += length - (end - start)
            elif position > start:
                return start + delta
        return position + delta

    return "".join(pieces), tuple(moved(p) for p in page_starts)
