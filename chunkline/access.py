"""Access control: which principals (users, groups, roles) may read a document, decided once as
it is read and carried onto every row made from it.

A *principal* is a name: a user, a group, a role. A document's principals are a sorted set of
them, found in the first of these sources that names any (:func:`principals_of`):

1. ``metadata_key``: the document's metadata value under that key (a JSONL field, a Parquet
   column, front matter: everything that lands in ``Document.metadata``), a string (one
   principal) or a list of strings;
2. ``mapping``: a YAML (or JSON) file of path glob patterns, each with a principal or a list of
   them, tried in file order against where the document comes from: its file's path relative
   to the input root (an archive member: the archive's path, and the archive's path with the
   member's, ``hr/x.zip//a.md``); the **first** pattern that matches decides (as a firewall's
   rules do: a catch-all ``"**"`` written last never widens a specific rule written above it).
   A record's own id never selects a rule: whoever writes ``"id": "wiki/public/x"`` into a
   ticket dump under ``hr/`` would otherwise choose who reads it;
3. ``default``: the principals of a document neither source names anything for. Empty (the
   default): such a document is readable by nobody. Deny by default.

The first source that names a principal wins, not the union of all: a document's own metadata
is the most specific statement about it, and a mapping pattern cannot widen it. A metadata
value of ``null`` or ``[]`` names nothing (the next source decides).

A document whose principals include the ``public`` name (``"public"`` unless set otherwise) is
readable by every caller; it is public only where the user put that name, never by default.

A principal is a non-empty string without a comma (readers pass a caller's principals as one
comma-separated setting: PostgreSQL's ``string_to_array(current_setting(...), ',')``), without
control characters and without leading or trailing whitespace (``" eng"`` silently differing
from ``"eng"`` would deny or grant by accident). A malformed value rejects the document with a
reason naming the key or pattern (:class:`AccessError`): it is never indexed with a guess.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Iterable, Sequence

import yaml
from annotated_types import MinLen

from chunkline.containers import MEMBER_SEPARATOR
from chunkline.options import check_fields, help_text
from chunkline.readers.paths import relative_id
from chunkline.records import Document

PUBLIC = "public"
# The separator a caller's principals travel in (``--as a,b``, ``chunkline.principals``).
SEPARATOR = ","
# A principal longer than this is a mistake (a pasted document, not a group name).
MAX_PRINCIPAL_CHARS = 256


class AccessError(ValueError):
    """A principal, a metadata value or a mapping that access control cannot use; the message
    says which, on one line."""


@dataclass(frozen=True)
class AccessOptions:
    """Where a document's principals come from (see the module docstring)."""

    metadata_key: Annotated[str, MinLen(1)] | None = field(default=None, metadata=help_text(
        "The metadata key holding a document's principals: a string or a list of strings "
        "(a JSONL field, a Parquet column, front matter). Checked first."))
    mapping: Annotated[str, MinLen(1)] | None = field(default=None, metadata=help_text(
        "A YAML or JSON file (a local path, relative to the working directory, or gs://) of "
        "path glob patterns -> principals ('hr/**': [hr]), matched in file order against the "
        "document's file path under the input root (an archive member: the archive's path and "
        "archive//member), never a record's own id; the first match decides. Read once, "
        "before the job. Checked when the metadata key names nothing."))
    default: tuple[str, ...] = field(default=(), metadata=help_text(
        "The principals of a document no source names any for. Empty (the default): readable "
        "by nobody (deny by default)."))
    public: Annotated[str, MinLen(1)] = field(default=PUBLIC, metadata=help_text(
        "The principal every caller holds: a document listing it is readable by all. Only "
        "where a source or the default puts it."))

    def __post_init__(self) -> None:
        check_fields(self)
        try:
            principal_set(self.default, "default")
            check_principal(self.public, "public")
        except AccessError as exc:
            raise ValueError(f"AccessOptions.{str(exc)}") from None
        if self.metadata_key is None and self.mapping is None and not self.default:
            raise ValueError("AccessOptions.metadata_key: access needs a metadata_key, a mapping "
                             "or a default; with none every document would be readable by nobody")


@dataclass(frozen=True)
class AccessPolicy:
    """:class:`AccessOptions` resolved on the driver: the mapping file read and compiled, the
    input root known. What :func:`principals_of` reads on every worker (no file is opened
    there)."""

    metadata_key: str | None = None
    rules: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (glob pattern, principals), file order
    default: tuple[str, ...] = ()
    public: str = PUBLIC
    root: str = ""  # the input root: a file's path is matched relative to it
    # ``rules`` compiled (re patterns pickle as their source: workers get them as they are).
    _compiled: tuple[re.Pattern, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(glob_regex(p) for p, _ in self.rules))

    def describe(self) -> dict[str, Any]:
        """What a run's manifest records of the policy: enough for a reader to know the index is
        protected and which name is public, and for an operator to see which mapping applied
        (its digest, not its content)."""
        return {"metadata_key": self.metadata_key, "default": list(self.default),
                "public": self.public, "mapping_rules": len(self.rules),
                "mapping_digest": mapping_digest(self.rules) if self.rules else None}


def check_principal(value: Any, where: str) -> str:
    """``value`` if it is a usable principal, else :class:`AccessError` naming ``where``."""
    if not isinstance(value, str):
        raise AccessError(f"{where}: a principal must be a string, got {_kind(value)}")
    if not value:
        raise AccessError(f"{where}: a principal must not be empty")
    if SEPARATOR in value:
        raise AccessError(f"{where}: principal {_shown(value)} holds a comma (give a list of "
                          "principals instead)")
    if any(unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") for ch in value):
        raise AccessError(f"{where}: principal {_shown(value)} holds a control character")
    if value != value.strip():
        raise AccessError(f"{where}: principal {_shown(value)} has leading or trailing whitespace")
    if len(value) > MAX_PRINCIPAL_CHARS:
        raise AccessError(f"{where}: a principal is at most {MAX_PRINCIPAL_CHARS} characters, "
                          f"got {len(value)}")
    return value


def principal_set(values: Iterable[Any], where: str) -> tuple[str, ...]:
    """``values`` checked (:func:`check_principal`), sorted, each once."""
    return tuple(sorted({check_principal(value, where) for value in values}))


def caller_principals(spec: str) -> tuple[str, ...]:
    """A caller's principals from ``a,b,c`` (``chunkline query --as``): checked, sorted, each
    once; AccessError for an empty list or a malformed name."""
    names = [name.strip() for name in spec.split(SEPARATOR)]
    if not any(names):
        raise AccessError("--as: name at least one principal")
    return principal_set((name for name in names if name), "--as")


def metadata_principals(doc: Document, key: str) -> tuple[str, ...]:
    """The principals the document's metadata names under ``key`` (a string or a list of
    strings; missing, null or ``[]``: none)."""
    found = dict(doc.metadata).get(key)
    if found is None:
        return ()
    value = json.loads(found)
    where = f"metadata {key!r}"
    if value is None:
        return ()
    if isinstance(value, str):
        return (check_principal(value, where),)
    if isinstance(value, list):
        return principal_set(value, where)
    raise AccessError(f"{where}: principals must be a string or a list of strings, got {_kind(value)}")


def source_paths(uri: str, root: str) -> tuple[str, ...]:
    """Where a document comes from, as mapping patterns see it: its file's path under ``root``
    and, for an archive member (``hr/x.zip//docs/a.md``), each enclosing archive's path
    (``hr/x.zip``), so that a rule naming an archive covers what it holds.

    >>> source_paths("/corpus/hr/x.zip//docs/a.md", "/corpus")
    ('hr/x.zip', 'hr/x.zip//docs/a.md')
    """
    path = relative_id(uri, root) if root else uri
    parts = path.split(MEMBER_SEPARATOR)
    return tuple(MEMBER_SEPARATOR.join(parts[:depth]) for depth in range(1, len(parts) + 1))


def mapping_principals(doc: Document, policy: AccessPolicy) -> tuple[str, ...]:
    """The principals of the first mapping pattern matching where the document comes from
    (:func:`source_paths` of its uri, never its id: a record's id is data its author wrote);
    () when none matches."""
    candidates = source_paths(doc.uri, policy.root)
    for (_, principals), pattern in zip(policy.rules, policy._compiled):
        if any(pattern.fullmatch(path) for path in candidates):
            return principals
    return ()


def principals_of(doc: Document, policy: AccessPolicy) -> tuple[str, ...]:
    """The document's principals: sorted, each once, from the first source that names any
    (metadata key, mapping, default; the module docstring). AccessError, naming the source, for
    a malformed value."""
    if policy.metadata_key is not None:
        found = metadata_principals(doc, policy.metadata_key)
        if found:
            return found
    found = mapping_principals(doc, policy)
    return found if found else policy.default


def readable(principals: Sequence[str] | None, caller: Sequence[str], public: str = PUBLIC) -> bool:
    """Whether a caller holding ``caller`` may read a row holding ``principals``: they share
    one, or the row is public. A row without principals (None: written with access off) is
    readable only where access was off, which the reader decides from the manifest."""
    if principals is None:
        return True
    held = set(caller) | {public}
    return any(principal in held for principal in principals)


def access_digest(principals: Sequence[str]) -> str:
    """A short digest of a principal set (sorted, as :func:`principals_of` gives it): dedupe
    groups and LSH band keys under it, so documents of two access sets never merge."""
    text = "\x00".join(principals)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def mapping_digest(rules: Sequence[tuple[str, tuple[str, ...]]]) -> str:
    return hashlib.blake2b(json.dumps([[p, list(n)] for p, n in rules]).encode(),
                           digest_size=16).hexdigest()


# --- The mapping file ---------------------------------------------------------------------------


def parse_mapping(text: str, source: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A mapping file's text (YAML, of which JSON is a part: a mapping of glob pattern to a
    principal or a list of principals) as (pattern, principals) rules in file order.
    AccessError naming ``source`` and the pattern for anything else."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AccessError(f"{source}: not YAML or JSON ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict) or not data:
        raise AccessError(f"{source}: must hold a mapping of path patterns to principals")
    rules = []
    for pattern, value in data.items():
        if not isinstance(pattern, str) or not pattern:
            raise AccessError(f"{source}: pattern {pattern!r} is not a non-empty string")
        where = f"{source}: pattern {pattern!r}"
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values:
            raise AccessError(f"{where}: give a principal or a non-empty list of principals")
        rules.append((pattern, principal_set(values, where)))
    return tuple(rules)


def load_policy(options: AccessOptions, root: str = "",
                read_text: Callable[[str], str] | None = None) -> AccessPolicy:
    """The policy of ``options``, the mapping file read with ``read_text`` (default: a local
    file; the pipeline passes one that reads gs:// too). AccessError, one line, for a mapping
    that cannot be read or is malformed."""
    rules: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if options.mapping is not None:
        read = read_text or _read_local
        try:
            text = read(options.mapping)
        except (OSError, UnicodeDecodeError) as exc:
            raise AccessError(f"access.mapping: cannot read {options.mapping} "
                              f"({type(exc).__name__}: {exc})") from None
        rules = parse_mapping(text, f"access.mapping {options.mapping}")
    return AccessPolicy(options.metadata_key, rules, principal_set(options.default, "default"),
                        options.public, root)


def _read_local(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def glob_regex(pattern: str) -> re.Pattern:
    """A path glob as a regular expression matched against a whole ``/``-separated path:
    ``*`` and ``?`` within one segment, ``[...]`` a character class, ``**`` any run of
    segments (``a/**/b`` matches ``a/b`` too), as gitignore and Beam's glob read them."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1:end]
            negated = body.startswith("!")
            body = re.escape(body[1:] if negated else body).replace("\\-", "-")
            out.append(f"[{'^' if negated else ''}{body}]")
            i = end + 1
        else:
            out.append(re.escape(ch))
            i += 1
    return re.compile("".join(out), re.S)


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", dict: "an object",
             list: "a list", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _shown(value: str) -> str:
    shown = value if len(value) <= 60 else value[:57] + "..."
    return ascii(shown)
