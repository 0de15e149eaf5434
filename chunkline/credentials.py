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
``BEGIN`` line to its ``END`` line (RFC 7468), and is one only with a body (a ``BEGIN`` marker as
a string constant, or beside ``<key bytes>``, is code, not a key). A fixed-form token cut in two
by a string continuation (``"AKIA..."`` + newline + ``"..."``) is found across the cut.

Not every kind weighs the same (:data:`CONFIDENCE`): a *confirmed* kind proves itself by its form
(a key with its body, a token with a provider prefix and a fixed length or checksum) and costs
the document in ``reject`` mode; a *loose* kind (a keyword assignment, a high-entropy string, a
short vendor prefix) is masked where found and never the reason a document is dropped
(:func:`rejecting`).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Final, Iterable, Literal, cast

from chunkline.options import check_fields, help_text
from chunkline.extras import require

# Final: each name has its literal type, the one CredentialOptions.mode declares.
REJECT: Final = "reject"
REDACT: Final = "redact"
ALLOW: Final = "allow"
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


# -- what a kind proves -------------------------------------------------------------------------
CONFIRMED: Final = "confirmed"
LOOSE: Final = "loose"
# Whether a kind's match is, by its form alone, a credential (CONFIRMED: in ``reject`` mode the
# document is a rejected row) or only may be one (LOOSE: the value is masked and the document
# indexed, whatever the mode). Confirmed: a provider's fixed prefix with a fixed length or a
# checksum (GitHub's last six characters are a CRC32, npm's too), or a private key with its body.
# Loose: what a pattern cannot tell from code and prose (a keyword assignment, a quoted string's
# entropy, a URI's or header's user:password, a two-letter vendor prefix such as Artifactory's
# ``AP``/``AKC``, Twilio's ``AC``/``SK`` or Mailchimp's ``-us``, a JWT, which docs paste as
# samples). A kind not named here (a plugin of a later detect-secrets) is loose: masked, never
# the reason a document is lost, until declared.
CONFIDENCE: dict[str, Literal["confirmed", "loose"]] = {
    # detect-secrets' plugins
    "AWS Access Key": LOOSE,  # an id alone names a key; beside its secret it is confirmed (rejecting)
    "Artifactory Credentials": LOOSE,  # AP[0-9A-F] + 8 letters also starts "APCadenomatous"
    "Azure Storage Account access key": CONFIRMED,  # AccountKey= and exactly 88 base64 characters
    "Base64 High Entropy String": LOOSE,
    "Basic Auth Credentials": LOOSE,
    "Cloudant Credentials": LOOSE,
    "Discord Bot Token": LOOSE,  # no prefix: three base64 runs of set lengths
    "GitHub Token": CONFIRMED,  # gh[pousr]_ + 36 (CRC32 at the end); github_pat_ + 82
    "GitLab Token": CONFIRMED,  # glpat-, glrt-, gldt-... prefixes
    "Hex High Entropy String": LOOSE,
    "IBM COS HMAC Credentials": LOOSE,
    "IBM Cloud IAM Key": LOOSE,
    "JSON Web Token": LOOSE,
    "Mailchimp Access Key": LOOSE,
    "NPM tokens": CONFIRMED,  # an .npmrc _authToken= line
    "OpenAI Token": CONFIRMED,  # T3BlbkFJ ("OpenAI") inside, or sk-proj-/sk-svcacct-/sk-admin-
    "Private Key": CONFIRMED,  # only ever found with its body (_whole_private_key)
    "PyPI Token": CONFIRMED,  # pypi-AgEIcHlwaS5vcmc (a macaroon naming pypi.org)
    "Secret Keyword": LOOSE,
    "SendGrid API Key": CONFIRMED,  # SG. + 22 + . + 43
    "Slack Token": CONFIRMED,  # xox[abposr]- and hooks.slack.com/services/T.../B...
    "SoftLayer Credentials": LOOSE,
    "Square OAuth Secret": CONFIRMED,  # sq0csp- + 43
    "Stripe Access Key": CONFIRMED,  # sk_live_/rk_live_ + 24
    "Telegram Bot Token": LOOSE,  # digits:35 characters, no prefix
    "Twilio API Key": LOOSE,  # AC/SK + 32: two letters, and AC is an account id
    # the rules below
    "Google API Key": CONFIRMED,
    "Google OAuth Client Secret": CONFIRMED,
    "Hugging Face Token": CONFIRMED,
    "Anthropic API Key": CONFIRMED,
    "npm Token": CONFIRMED,
    "Shopify Token": CONFIRMED,
    "DigitalOcean Token": CONFIRMED,
    "Databricks Token": CONFIRMED,
    "Postman API Key": CONFIRMED,
    "Azure AD Client Secret": CONFIRMED,  # the Q~ marker at a fixed place, fixed length
    "Mailgun API Key": CONFIRMED,  # key- + 32 hex, assigned to a name holding "mailgun"
    "Connection String Password": LOOSE,
    "Bearer Token": LOOSE,
    "Azure SAS Signature": LOOSE,  # an HMAC: its form proves no more than a checksum's
    "MySQL Password": LOOSE,
}
AWS_KIND = "AWS Access Key"
# detect-secrets' AWSKeyDetector's id pattern; gitleaks' aws-access-token is the same prefixes.
_AWS_ID = re.compile(r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}")
# A line naming an AWS secret key (``aws_secret_access_key``, ``"SecretAccessKey":``).
_AWS_SECRET_NAME = re.compile(r"(?i)aws.{0,20}?secret|secret.{0,3}access.{0,3}key")


# -- value checks of the rules below ------------------------------------------------------------
# Stand-ins for a value: curl-auth-user's allowlist in gitleaks (changeit, pass, token, ***,
# xxx), templates (${VAR}, $(cmd), {{ var }}, %VAR% as nuget-config-password allows), an
# ellipsis, an angle-bracketed description (<key bytes>).
_STAND_IN = re.compile(r"(?i)change(?:it|me)|pass(?:word)?|pwd|test|token|secret|\*+|x{3,}|\.{3,}"
                       r"|…|<[^>]*>|\$\{?\w+\}?|\$\([^)]*\)|\{\{.*\}\}|%\S+%|#\{[^}]*\}#?|(?-i:[A-Z_]+)")


def _stand_in(value: str) -> bool:
    """A placeholder, or a value already redacted (a redacted text scans clean)."""
    return (bool(_STAND_IN.fullmatch(value)) or value.lower() in _PLACEHOLDERS
            or bool(_EXAMPLE.search(value)) or len(set(value)) <= 2 or "[REDACTED " in value
            or "..." in value or "…" in value)  # elided: client_secret='Qh...wwI'


def _basic_credentials(value: str) -> bool:
    """A base64 ``user:password`` (RFC 7617's Basic scheme, a .dockerconfigjson ``auth``) whose
    password is no stand-in."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    _, colon, password = decoded.partition(":")
    return (bool(colon) and decoded.isprintable() and len(password) >= 3
            and not _stand_in(password) and decoded != "Aladdin:open sesame")  # RFC 7617's example


def _shannon(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _generated_token(value: str) -> bool:
    """A bearer token or a URI's password: generated-looking (:func:`_plausible_secret`), over
    gitleaks' curl-auth-header entropy (2.75 bits per character)."""
    return _plausible_secret(value) and _shannon(value) > 2.75 and not _stand_in(value)


def _given_value(value: str) -> bool:
    return len(value) >= 4 and not _stand_in(value)


# -- extra rules --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Rule:
    """A pattern of gitleaks' default config (``config/gitleaks.toml``, rule id in a comment)
    or, where neither gitleaks nor detect-secrets keeps one, of our own (said so)."""

    kind: str
    pattern: re.Pattern
    needles: tuple[str, ...]  # lowercase literals every match holds: a line without one is skipped
    group: int = 1  # the group holding the value
    check: Callable[[str], bool] | None = None  # what the value must also be


def _rule(kind: str, pattern: str, needles: tuple[str, ...], group: int = 1,
          check: Callable[[str], bool] | None = None) -> _Rule:
    return _Rule(kind, re.compile(pattern), needles, group, check)


_EXTRA_RULES: tuple[_Rule, ...] = (
    _rule("Google API Key", r"\b(AIza[\w-]{35})(?![\w-])", ("aiza",)),  # gcp-api-key
    _rule("Google OAuth Client Secret", r"\b(GOCSPX-[\w-]{28})(?![\w-])", ("gocspx-",)),  # gcp-client-secret
    _rule("Hugging Face Token", r"\b(hf_[a-zA-Z]{34})(?![\w-])", ("hf_",)),  # huggingface-access-token
    _rule("Anthropic API Key", r"\b(sk-ant-(?:api03|admin01)-[\w-]{93}AA)(?![\w-])",
          ("sk-ant-",)),  # anthropic-api-key
    # openai-api-key's project, service-account and admin keys; detect-secrets knows the old form.
    _rule("OpenAI Token", r"\b(sk-(?:proj|svcacct|admin)-[\w-]{40,})(?![\w-])",
          ("sk-proj-", "sk-svcacct-", "sk-admin-")),
    _rule("npm Token", r"\b(npm_[a-zA-Z0-9]{36})(?![\w-])", ("npm_",)),  # npm-access-token
    _rule("Shopify Token", r"\b(shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})\b",
          ("shpat_", "shpca_", "shppa_", "shpss_")),  # shopify-*
    _rule("DigitalOcean Token", r"\b(do[opr]_v1_[a-f0-9]{64})\b", ("_v1_",)),  # digitalocean-*
    _rule("Databricks Token", r"\b(dapi[a-f0-9]{32}(?:-\d)?)\b", ("dapi",)),  # databricks-api-token
    _rule("Postman API Key", r"\b(PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34})\b", ("pmak-",)),  # postman-api-token
    _rule("GitLab Token", r"\b(glpat-[\w-]{20,})(?![\w-])", ("glpat-",)),  # gitlab-pat
    _rule("Azure AD Client Secret", r"(?:^|[\s'\"`=:(,])([\w~.]{3}\dQ~[\w~.-]{31,34})(?![\w~.-])",
          ("q~",)),  # azure-ad-client-secret
    # ADO.NET / ODBC connection strings ("Server=db;User Id=sa;Password=...;"): the password of
    # a string that also names a server, so a prose "password=" is not taken for one (our own).
    _rule("Connection String Password",
          r"(?i)\b(?:server|data source|host|addr(?:ess)?)\s*=[^;\n]*;[^\n]*?\b(?:password|pwd)\s*=\s*"
          r"([^;'\"\s\[]{4,})", ("password", "pwd"), check=_given_value),
    _rule("GitHub Token", r"\b(github_pat_\w{82})(?!\w)", ("github_pat_",)),  # github-fine-grained-pat
    _rule("Mailgun API Key",  # mailgun-private-api-token, as is
          r"(?i)[\w.-]{0,50}?(?:mailgun)(?:[ \t\w.-]{0,20})[\s'\"]{0,3}(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"
          r"[\x60'\"\s=]{0,5}(key-[a-f0-9]{32})(?:[\x60'\"\s;]|\\[nr]|$)", ("mailgun",)),
    # private-key's header: it also knows PKCS#8's ENCRYPTED PRIVATE KEY, which detect-secrets'
    # PrivateKeyDetector lacks. A key counts with its body only (_whole_private_key).
    _rule("Private Key", r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----", ("-----begin",), 0),
    # curl-auth-header's header alternatives (Basic and Bearer/Token), without its `curl`: the
    # same header in a ticket, a log or a requests call. Basic's value must decode to
    # user:password, Bearer's must look generated.
    _rule("Basic Auth Credentials",
          r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?basic[ \t]+([a-z0-9+/]{8,}={0,3})",
          ("authorization",), check=_basic_credentials),
    _rule("Bearer Token",
          r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?(?:bearer|(?:api-)?token)[ \t]+([\w=~@.+/-]{8,})",
          ("authorization",), check=_generated_token),
    # Our own, no kept rule: a .dockerconfigjson / ~/.docker/config.json registry entry's
    # "auth", base64 of user:password.
    _rule("Basic Auth Credentials", r"[\"']auth[\"']\s*:\s*[\"']([A-Za-z0-9+/]{8,}={0,2})[\"']",
          ("auth",), check=_basic_credentials),
    # detect-secrets' BasicAuthDetector (`://[^{}\s]+:([^{}\s]+)@`) needs a user; Redis' URIs
    # carry a password alone (redis://:password@host).
    _rule("Basic Auth Credentials", r"\b[a-z][a-z0-9+.-]*://:([^{}\s@/:]+)@", ("://:",),
          check=_generated_token),
    # nuget-config-password, for every .NET config (App.config, Web.config) and any key naming a
    # credential (DbPassword, Smtp.Secret), not a setting about one (PasswordLength, TokenUrl).
    _rule("Secret Keyword",
          r"(?i)<add\s+key\s*=\s*\"[\w.:-]*?(?:passw(?:or)?d|pwd|secret|api[_.-]?key|token)"
          r"(?![\w.:-]*?(?:url|uri|endpoint|length|size|name|id|file|path|expir|timeout|format|"
          r"policy|lifetime|type))[\w.:-]*\"\s+value\s*=\s*\"([^\"]{8,})\"", ("<add",),
          check=_given_value),
    # Our own, no kept rule: an Azure Storage shared access signature's sig= (a URL with the SAS
    # fields sv/se/sp/sr before it), base64 of an HMAC-SHA256, often percent-encoded.
    _rule("Azure SAS Signature",
          r"(?i)[?&]s[vepr]=[^\s&\"'<>]*(?:&[^\s&\"'<>]*)*?&sig=((?:[a-z0-9+/]|%2[bf]){30,}(?:%3d|=){0,2})",
          ("sig=",), check=_given_value),
    # Our own, no kept rule: the MySQL clients' -p<password> (the password glued to -p; with a
    # space, -p asks for it).
    _rule("MySQL Password",
          r"\bmysql(?:dump|admin|import|sh|slap|check)?\b[^\n]*?[ \t]-p(?P<q>[\"']?)"
          r"([^\s\"'`;|&]{3,})(?P=q)(?=\s|$)",
          ("mysql",), 2, check=_given_value),
)
# Fixed-form tokens that code cuts with a string continuation ("AKIA..." newline "..."): found
# over the cut (_wrapped_tokens). detect-secrets' AWS id and GitHub patterns, gitleaks' rules.
_WRAPPABLE: tuple[tuple[str, re.Pattern], ...] = tuple(
    (kind, re.compile(rf"(?<![A-Za-z0-9]){pattern}(?![A-Za-z0-9])")) for kind, pattern in (
        (AWS_KIND, _AWS_ID.pattern),
        ("GitHub Token", r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}|github_pat_\w{82}"),
        ("Google API Key", r"AIza[\w-]{35}"),
        ("OpenAI Token", r"sk-(?:proj|svcacct|admin)-[\w-]{40,}"),
        ("Slack Token", r"xox[abposr]-(?:\d+-)+[a-zA-Z0-9]+"),
        ("Stripe Access Key", r"[rs]k_live_[0-9a-zA-Z]{24}"),
    ))
# A string continuation: a quote closing one line's string and one opening the next's, with a
# concatenation operator or none between (Python, JS, Java, PHP, shell), or a backslash-newline
# inside a string.
_WRAP_GAP = re.compile(r"[\"'`][ \t]*(?:[+&.]|\|\|)?[ \t]*\\?\r?\n[ \t]*(?:[+&.]|\|\|)?[ \t]*[\"'`]"
                       r"|\\\r?\n[ \t]*")
_WRAP_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")

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
_PEM_BEGIN = re.compile(r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
# Specific detectors first: when two find the same span, the more specific names it.
_GENERIC_KINDS = ("Secret Keyword", "Bearer Token", "Basic Auth Credentials", *sorted(ENTROPY_KINDS))


class Scanner:
    """detect-secrets' plugins and filters, built once (a worker builds one in ``setup``).

    Each detector's patterns are first run over the whole text, in C, to find the lines where
    it could find anything (compiled with ``re.MULTILINE``, so ``^`` and ``$`` still mean a
    line's ends); the detector itself then reads those lines only, as detect-secrets reads a
    file line by line. Most lines of prose meet no pattern at all."""

    def __init__(self, options: CredentialOptions) -> None:
        # Imported here, once per scanner, not per document or line (detect-secrets pulls in
        # requests: a run with `secrets: allow` never imports it).
        require("credentials", "detect_secrets")
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.filters import heuristic
        from detect_secrets.plugins.base import BasePlugin
        from detect_secrets.plugins.keyword import (
            QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
            REGEX_BY_FILETYPE,
            KeywordDetector,
        )
        from detect_secrets.util.filetype import FileType, determine_file_type

        self.heuristic, self.keyword_class = heuristic, KeywordDetector
        self.keyword_regexes = lambda name: REGEX_BY_FILETYPE.get(
            determine_file_type(name or "document.txt"), QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP)
        # Text that is not a program's source (Markdown, plain text, .env, JSON): where the
        # config-file patterns read unquoted values too (_line_values).
        self.prose = lambda name: determine_file_type(name or "document.txt") is FileType.OTHER
        self.options = options
        # Annotated: the function returns Dict[str, Type[Plugin]] for a TypeVar Plugin its
        # arguments never bind (mypy reads it as Type[Never]).
        classes = cast("dict[str, type[BasePlugin]]", get_mapping_from_secret_type_to_class())
        self.plugins = [cls() for kind, cls in sorted(classes.items())
                        if kind not in _LEFT_OUT and (options.entropy or kind not in ENTROPY_KINDS)]
        self.extra = list(_EXTRA_RULES)
        self.screens = [_multiline(getattr(plugin, "denylist", ())) for plugin in self.plugins]

    def scan(self, text: str, name: str = "") -> list[Finding]:
        """Every credential in ``text`` (``name``: the file's name, which decides how the keyword
        plugin reads assignments), in text order, overlapping spans merged."""
        keyword_regexes, prose = self.keyword_regexes(name), self.prose(name)
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
            for index in lines_with(rule.needles):
                wanted.setdefault(index, []).append(rule)
        found: list[Finding] = []
        for index in sorted(wanted):
            start = line_starts[index]
            end = line_starts[index + 1] - 1 if index + 1 < len(line_starts) else len(text)
            found += self.line_findings(text[start:end], start, index + 1, wanted[index],
                                        keyword_regexes, prose)
        return finish(text, found, line_starts)

    def line_findings(self, line: str, start: int, number: int, detectors: list, keyword_regexes,
                      prose: bool) -> list[Finding]:
        """What ``detectors`` find on one line (``number``, starting at ``start`` in its text),
        each value widened to its whole token."""
        found = []
        for kind, value in self._line_values(line, detectors, keyword_regexes, prose):
            for left, right in _spans(line, value):
                if _EXAMPLE.search(line[left:right]):  # a documented example, widened
                    continue
                # gitleaks' aws-access-token wants an id to be a word of its own; detect-secrets'
                # pattern also finds one inside a base64 blob (a font embedded in code).
                if kind == AWS_KIND and _AWS_ID.fullmatch(value) and \
                        not _AWS_ID.fullmatch(line[left:right].rstrip(".")):
                    continue
                found.append(Finding(kind, start + left, start + right, number))
        return found

    def _line_values(self, line: str, detectors: list, keyword_regexes,
                     prose: bool = True) -> Iterable[tuple[str, str]]:
        heuristic = self.heuristic
        for detector in detectors:
            if isinstance(detector, _Rule):
                for match in detector.pattern.finditer(line):
                    value = match.group(detector.group)
                    if value and not _EXAMPLE.search(value) and (
                            detector.check is None or detector.check(value)):
                        yield detector.kind, value
                continue
            plugin, kind = detector, detector.secret_type
            if kind in ENTROPY_KINDS and (_DIGEST_WORDS.search(line) or not _QUOTES.search(line)):
                continue
            if isinstance(plugin, self.keyword_class):
                values = list(plugin.analyze_string(line, denylist_regex_to_group=keyword_regexes))
                if prose and keyword_regexes is not _config_keyword_regexes():
                    # Prose and Markdown hold config snippets too (`export DB_PASSWORD=...`,
                    # `password: ...`): detect-secrets' config-file patterns, where a value
                    # counts only when it looks generated, not like a word of a sentence. Not
                    # in a program's source, where an unquoted value is an expression
                    # (`password = Prompt.ask(`): there detect-secrets wants quotes.
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
                if kind == "Secret Keyword" and (_CODE_VALUE.fullmatch(value) or _stand_in(value)):
                    continue
                if kind == "Artifactory Credentials" and not _mixed(value.strip(" \t\"'=:")):
                    continue
                if kind in ENTROPY_KINDS and (
                        plugin.calculate_shannon_entropy(value) <= plugin.entropy_limit
                        or _path_like(value)):
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
# An expression, not a literal: an attribute (``settings.SECRET_KEY``), a call or a subscript
# (``Prompt.ask(``, ``getpass(``, ``kwargs["password"]``), as an unquoted value is in code.
_CODE_VALUE = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|->|\?\.)[A-Za-z_$][\w$]*)+(?:[(\[].*)?"
                         r"|[A-Za-z_$][\w$]*[(\[].*")


def _path_like(value: str) -> bool:
    """A resource path (``projects/12345/global/networks/myVPC``): half its ``/``-separated
    parts or more are lowercase words, which base64's random parts are not."""
    parts = value.split("/")
    return len(parts) >= 3 and 2 * sum(bool(_LOWER_WORD.fullmatch(part)) for part in parts) >= len(parts)


_LOWER_WORD = re.compile(r"[a-z]{3,}")


def _mixed(value: str) -> bool:
    """Upper and lower case letters and digits: what a generated token of a short vendor prefix
    holds (Artifactory's AP.../AKC...), and an abbreviation before a word does not
    (``APCadenomatous``)."""
    return (any(c.isdigit() for c in value) and any(c.isupper() for c in value)
            and any(c.islower() for c in value))


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


# A key's body: the pieces between line breaks, real or escaped (a JSON service-account file's
# "-----BEGIN PRIVATE KEY-----\nMIIE...\n"), each stripped of what quotes it or comments it out
# in code (`"..."`, `+`, `#`, `//`, `*`, `>`).
_PIECE = re.compile(r"(?:[^\n\\]|\\(?![nr]))+")
_PIECE_EDGES = re.compile(r"^[\s#/*>\"'`(+,]*|[\s\"'`)+,;\\]*$")
_BASE64_PIECE = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_PEM_HEADER = re.compile(r"[A-Za-z][\w-]*:\s*\S.*")  # Proc-Type:, DEK-Info:, Comment:, Public-Lines:
# gitleaks' private-key wants 64 characters between BEGIN and END; a body line is 64 (PEM) or 70
# (OpenSSH) characters, so a real body has one of 40 or more.
_MIN_KEY_BODY, _MIN_KEY_LINE = 64, 40


def _key_block_end(text: str, at: int) -> int | None:
    """Where the key whose header ends at ``at`` ends: after its ``END`` marker, or after its
    last body line when the marker is missing (a truncated paste, PuTTY's format); None when
    no base64 body follows (a ``BEGIN`` marker as a string constant, ``<key bytes>``,
    ``...``)."""
    body = longest = 0
    last = None
    for piece in _PIECE.finditer(text, at, min(len(text), at + 64 * 1024)):
        chunk = piece.group()
        end_marker = _PEM_END.search(chunk)
        if end_marker is not None:
            core = _PIECE_EDGES.sub("", chunk[:end_marker.start()])
            if core and _BASE64_PIECE.fullmatch(core):
                body, longest = body + len(core), max(longest, len(core))
            if body >= _MIN_KEY_BODY and longest >= _MIN_KEY_LINE:
                return piece.start() + end_marker.end()
            return None
        core = _PIECE_EDGES.sub("", chunk)
        if not core:
            continue
        if _BASE64_PIECE.fullmatch(core):
            body, longest, last = body + len(core), max(longest, len(core)), piece.end()
        elif not _PEM_HEADER.fullmatch(core):
            break
    return last if body >= _MIN_KEY_BODY and longest >= _MIN_KEY_LINE else None


def _whole_private_key(text: str, finding: Finding, line_starts: list[int]) -> Finding | None:
    """A private key runs from its ``-----BEGIN ... PRIVATE KEY-----`` to the matching ``END``
    line (RFC 7468); without one, over the body lines that follow. None without a body: a
    header alone is code or documentation, not a key."""
    line_start = line_starts[finding.line - 1]
    begin = _PEM_BEGIN.search(text, max(line_start, finding.start - 16), finding.end + 16)
    if begin is not None:
        start, body_at = begin.start(), begin.end()
    else:  # PuTTY-User-Key-File-2, ---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----: the next lines
        start = line_start
        body_at = text.find("\n", finding.end)
        if body_at < 0:
            return None
    end = _key_block_end(text, body_at)
    return None if end is None else Finding(finding.kind, start, end, finding.line)


def _wrapped_tokens(text: str) -> list[Finding]:
    """Fixed-form tokens (:data:`_WRAPPABLE`) cut by a string continuation, each a finding over
    both pieces and the cut between them."""
    found = []
    for gap in _WRAP_GAP.finditer(text):
        left = gap.start()
        while left > 0 and gap.start() - left < 128 and text[left - 1] in _WRAP_CHARS:
            left -= 1
        right = gap.end()
        while right < len(text) and right - gap.end() < 128 and text[right] in _WRAP_CHARS:
            right += 1
        head, tail = text[left:gap.start()], text[gap.end():right]
        if not head or not tail:
            continue
        joined = head + tail
        for kind, pattern in _WRAPPABLE:
            for match in pattern.finditer(joined):
                if not match.start() < len(head) < match.end() or _EXAMPLE.search(match.group()):
                    continue
                start, end = left + match.start(), gap.end() + match.end() - len(head)
                if not _allowlisted(_lines_of(text, start, end)):
                    found.append(Finding(kind, start, end, 0))
    return found


def _lines_of(text: str, start: int, end: int) -> str:
    """The whole lines that ``text[start:end]`` runs over."""
    line_end = text.find("\n", end)
    return text[text.rfind("\n", 0, start) + 1:len(text) if line_end < 0 else line_end]


def finish(text: str, found: list[Finding], line_starts: list[int]) -> list[Finding]:
    """The line findings of a scan made whole: each private key over its block (dropped without
    a body), the tokens cut by a string continuation added, overlapping spans merged."""
    whole = []
    for finding in found:
        kept = _whole_private_key(text, finding, line_starts) if finding.kind == "Private Key" else finding
        if kept is not None:
            whole.append(kept)
    return _merged(whole + _wrapped_tokens(text), line_starts)


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


def rejecting(text: str, findings: list[Finding]) -> list[Finding]:
    """The findings of ``text`` that cost the whole document in ``reject`` mode: those of a
    confirmed kind (:data:`CONFIDENCE`), and an AWS key id with a secret key named in the same
    text (either alone is loose: an id is no secret, and a value beside ``aws_secret`` may be
    any string). The others are masked."""
    chosen = {f for f in findings if CONFIDENCE.get(f.kind, LOOSE) == CONFIRMED}
    ids = {f for f in findings
           if f.kind == AWS_KIND and _AWS_ID.search(_UNWRAP.sub("", text[f.start:f.end]))}
    # AWSKeyDetector's own secret pattern (aws...key = "<40>"), or any finding on a line naming
    # an AWS secret key (an unquoted aws_secret_access_key, a JSON SecretAccessKey).
    secrets = {f for f in findings if f not in ids and (
        f.kind == AWS_KIND or _AWS_SECRET_NAME.search(_lines_of(text, f.start, f.start)))}
    if ids and secrets:
        chosen |= ids | secrets
    return sorted(chosen, key=lambda f: f.start)


# What a string continuation puts inside a wrapped token's span.
_UNWRAP = re.compile(r"[\s\"'`+&.|\\]")


@lru_cache(maxsize=1)
def rules_digest() -> str:
    """This module's source and detect-secrets' version, hashed: what a memo of findings
    (``chunkline.memo``) was made with, so that findings of other rules are never recalled.
    Read from the files, so that a rerun recalling every scan still never imports
    detect-secrets."""
    from importlib.metadata import version

    data = Path(__file__).read_bytes() + version("detect-secrets").encode()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


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
