"""chunkline.credentials: generated credentials of fourteen kinds and the ten forms issue #48
found missed are all found, lookalikes and code or prose that only names a credential are not,
redaction keeps every other character and every page start where it belongs, and only a
confirmed kind costs a document in ``reject`` mode."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.credentials import (
    CONFIDENCE,
    CONFIRMED,
    MARKER,
    CredentialOptions,
    Finding,
    Scanner,
    describe,
    redact,
    rejecting,
)
from chunkline.records import Document
from chunkline.pipeline.config import ConfigError, load_config
from tests.credential_cases import credentials, lookalikes, missed, spared
from chunkline.transforms.credentials import _ScanDocument

SCANNER = Scanner(CredentialOptions())


@pytest.mark.parametrize("case", credentials(), ids=lambda case: case.kind)
def test_every_generated_credential_is_found_and_redacted_whole(case) -> None:
    findings = SCANNER.scan(case.text, case.name)
    assert findings, case.text
    text, _ = redact(case.text, findings)
    assert case.secret not in text
    # Nothing of the value is left beside its marker (a token widened to its ends).
    for piece in (case.secret[:12], case.secret[-12:]):
        assert piece not in text, text
    assert case.secret not in describe(findings)


def test_at_most_two_lookalikes_are_flagged() -> None:
    flagged = [case.text for case in lookalikes() if SCANNER.scan(case.text, case.name)]
    assert len(flagged) <= 2, flagged


def test_the_reason_names_kind_and_line_never_the_value() -> None:
    case = next(c for c in credentials() if c.kind == "RSA private key")
    findings = SCANNER.scan(case.text, case.name)
    assert describe(findings) == "1 credential: Private Key (lines 5-19)"
    assert case.secret.splitlines()[1] not in describe(findings)


def test_the_allowlist_pragma_and_entropy_off() -> None:
    github = next(c for c in credentials() if c.kind == "GitHub token")
    assert not SCANNER.scan(github.text.rstrip() + "  # pragma: allowlist secret\n", github.name)
    quoted = 'upload_signature = "Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5"\n'
    assert SCANNER.scan(quoted, "app.md")
    assert not Scanner(CredentialOptions(entropy=False)).scan(quoted, "app.md")


def test_a_redacted_text_scans_clean() -> None:
    text = "\n\n".join(case.text for case in credentials())
    redacted, _ = redact(text, SCANNER.scan(text, "all.md"))
    assert not SCANNER.scan(redacted, "all.md")
    assert redacted.count("[REDACTED ") == len(credentials())


# The ones a detector knows by their form alone (an AWS secret key needs its variable's name).
SECRETS = [case.secret for case in credentials()
           if "\n" not in case.secret and SCANNER.scan(f"token {case.secret} ", "notes.md")]
PROSE = st.text(alphabet=st.sampled_from(list("abcdefghij klmnop\n.,")), max_size=60)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(PROSE, st.sampled_from(SECRETS)), min_size=1, max_size=4), PROSE,
       st.data())
def test_redaction_keeps_the_rest_of_the_text_and_moves_page_starts(pieces, tail, data) -> None:
    text = "".join(f"{prose} token {secret} " for prose, secret in pieces) + tail
    findings = SCANNER.scan(text, "notes.md")
    page_starts = tuple(sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=5)))))
    redacted, moved = redact(text, findings, page_starts)
    # Outside the findings, the text is the same characters in the same order.
    kept, at = [], 0
    for f in findings:
        kept.append(text[at:f.start])
        at = f.end
    kept.append(text[at:])
    assert redacted == "".join(
        piece + (MARKER.format(kind=f.kind) if i < len(findings) else "")
        for i, (piece, f) in enumerate(zip(kept, [*findings, None])))
    for _, secret in pieces:
        assert secret not in redacted
    # A page start keeps pointing at the same character (or, inside a span, at its marker).
    for before, after in zip(page_starts, moved):
        inside = next((f for f in findings if f.start <= before < f.end), None)
        if inside is not None:
            assert redacted[after:].startswith(MARKER.format(kind=inside.kind))
        elif before < len(text):
            assert redacted[after] == text[before]
        assert 0 <= after <= len(redacted)
    assert list(moved) == sorted(moved)


def test_the_config_takes_a_mode_alone_and_rejects_others() -> None:
    assert load_config(None, ["secrets=redact"]).secrets.options().mode == "redact"
    assert load_config(None, []).secrets.options() == CredentialOptions()
    with pytest.raises(ConfigError, match="secrets.mode"):
        load_config(None, ["secrets.mode=maybe"])


@pytest.mark.parametrize("line, flagged", [
    ('conn = connect("postgres", password="my-password")', False),  # documentation's stand-ins
    ('file.load_key(password="Passw0rd")', False),
    ('OPENAI_API_KEY="My API Key"', False),
    ("api_key='GEMINI_API_KEY'", False),
    ("proxy = 'socks5://user:pass@host:port'", False),
    ('db_password = "q7Lm2Vx9Rt4Z"', True),  # a generated one
    ("export DB_PASSWORD=S3cr3tValue9", True),  # unquoted, in a Markdown code block
    ("proxy = 'socks5://ops:Kq82mZx7Lp@proxy.internal:1080'", True),
])
def test_a_keyword_or_uri_value_counts_only_when_it_looks_generated(line, flagged) -> None:
    assert bool(SCANNER.scan(line + "\n", "notes.md")) is flagged


def naive_scan(scanner: Scanner, text: str, name: str) -> list:
    """Every detector asked about every line, as detect-secrets reads a file: what the scan's
    screening (patterns and literal words over the whole text) must never change."""
    from chunkline import credentials

    line_starts = [0, *(i + 1 for i, c in enumerate(text) if c == "\n")]
    detectors = [*scanner.plugins, *scanner.extra]
    keyword, prose = scanner.keyword_regexes(name), scanner.prose(name)
    found = []
    for index, start in enumerate(line_starts):
        end = line_starts[index + 1] - 1 if index + 1 < len(line_starts) else len(text)
        found += scanner.line_findings(text[start:end], start, index + 1, detectors, keyword, prose)
    return credentials.finish(text, found, line_starts)


FRAGMENTS = [case.text for case in [*credentials(), *lookalikes(), *missed(), *spared()]] + [
    "api_key: 'Zq8vN2xLp4Tr9sQ1'", 'cloudant_password = "abcdefghijklmnopqrstuvwx"',
    "ibm_cloud_iam_key: " + "a1B2" * 11, "mailchimp 0123456789abcdef0123456789abcdef-us12",
    "İstanbul KEY=Zq8vN2xLp4Tr9sQ1x ", "plain prose about the arm\n", "\n", "  "]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8), st.sampled_from(["a.md", "c.yaml", "x.py"]))
def test_screening_finds_what_asking_every_detector_on_every_line_finds(parts, name) -> None:
    text = " ".join(parts)
    assert SCANNER.scan(text, name) == naive_scan(SCANNER, text, name)


# -- issue #48: the missed forms, code and prose spared, loose kinds masked ----------------------

def pieces_left(secret: str, text: str, width: int = 8) -> list[str]:
    """Every ``width``-character piece of ``secret`` (none across a line break) still in
    ``text``: a redacted text keeps none."""
    return [secret[i:i + width] for i in range(len(secret) - width + 1)
            if "\n" not in secret[i:i + width] and secret[i:i + width] in text]


@pytest.mark.parametrize("case", [*credentials(), *missed()], ids=lambda case: case.kind)
def test_redact_leaves_no_piece_of_any_credential(case) -> None:
    findings = SCANNER.scan(case.text, case.name)
    assert findings, case.text
    text, _ = redact(case.text, findings)
    assert not pieces_left(case.secret, text), text
    assert not SCANNER.scan(text, case.name)


@pytest.mark.parametrize("case", spared(), ids=lambda case: case.name)
def test_code_and_prose_that_only_name_a_credential_are_not_one(case) -> None:
    assert SCANNER.scan(case.text, case.name) == []


def test_an_abbreviation_before_a_word_is_not_an_artifactory_password() -> None:
    # A 500 KB corpus of abstracts was rejected for this line (ArtifactoryDetector's
    # AP[0-9A-F][a-zA-Z0-9]{8,}); a generated one, mixing cases and digits, still counts.
    assert SCANNER.scan("APCadenomatous polyposis coli\n", "abstracts.txt") == []
    assert [f.kind for f in SCANNER.scan("artifactory_password: AP6xPz2bQ9vLr4Tn\n", "notes.md")] \
        == ["Artifactory Credentials"]


def pem(body_lines: int, label: str = "RSA PRIVATE KEY") -> str:
    body = "\n".join("MIIEpAIBAAKCAQEA" + "q7Lm2Vx9Rt4Z" * 4 for _ in range(body_lines))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


def test_a_private_key_is_one_with_its_body_only() -> None:
    key = pem(3)
    assert [(f.kind, f.line, f.last_line) for f in SCANNER.scan(f"x\n{key}\ny\n", "a.md")] \
        == [("Private Key", 2, 6)]
    # A service account's JSON: the body between escaped line breaks.
    escaped = json.dumps({"private_key": pem(3, "PRIVATE KEY") + "\n"})
    found = SCANNER.scan(escaped, "sa.json")
    assert len(found) == 1 and redact(escaped, found)[0] == '{"private_key": "[REDACTED Private Key]\\n"}'
    # PKCS#8's encrypted form (gitleaks' private-key header; detect-secrets lacks it).
    assert SCANNER.scan(pem(2, "ENCRYPTED PRIVATE KEY"), "k.pem")
    assert not SCANNER.scan(pem(0), "k.pem")  # BEGIN and END, nothing between
    # PuTTY's format has no END line: the key runs over its header and body lines.
    body = "\n".join(["AAAAB3NzaC1yc2EAAAABJQAAAQEAhtW8Qn2PjX6Xk0oF+Hq7Lm2Vx9Rt4Z"] * 3)
    putty = (f"PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPublic-Lines: 3\n{body}\n"
             f"Private-Lines: 3\n{body}\n\nThen connect.\n")
    assert redact(putty, SCANNER.scan(putty, "k.ppk"))[0] == "[REDACTED Private Key]\n\nThen connect.\n"


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 19), st.sampled_from(['"\n    "', '" +\n    "', '"\n    + "', "\\\n"]))
def test_an_aws_key_id_cut_by_a_string_continuation_is_found_whole(cut, gap) -> None:
    key_id = "AKIA" + "Q2W3E4R5T6Y7U2I3"
    text = f'aws_access_key_id = ("{key_id[:cut]}{gap}{key_id[cut:]}")\n'
    findings = SCANNER.scan(text, "settings.py")
    assert [f.kind for f in findings] == ["AWS Access Key"]
    assert redact(text, findings)[0] == 'aws_access_key_id = ("[REDACTED AWS Access Key]")\n'


NAMES = st.sampled_from(["password", "db_password", "PASSWORD", "api_key", "apiKey", "secret",
                         "client_secret", "token", "private_key", "AWS_SECRET_ACCESS_KEY",
                         "self.password", "config['secret']"])
IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,14}", fullmatch=True)
EXPRESSIONS = st.one_of(
    st.builds(lambda a, b: f"{a}.{b}(", IDENT, IDENT),  # a call left open on its line
    st.builds(lambda a, b, c: f"{a}.{b}.{c}", IDENT, IDENT, IDENT),  # an attribute
    st.builds(lambda a, b: f"{a}({b})", IDENT, IDENT),  # a call
    st.builds(lambda a, b: f'{a}["{b}"]', IDENT, IDENT),  # a subscript
    st.builds(lambda a: f'"<{a} bytes>"', IDENT),
    st.builds(lambda a: f'"${{{a.upper()}}}"', IDENT),
    st.builds(lambda a: f'"{{{{ {a} }}}}"', IDENT),
    st.sampled_from(['"..."', '"xxx"', '"xxxxxxxxxxxx"', '"changeme"', '"CHANGE_ME"', '"***"',
                     '"your-api-key-here"', "None", '""', 'getpass.getpass("Password: ")',
                     'Prompt.ask("Password", password=True)', 'input("Token: ")',
                     'os.environ["DB_PASSWORD"]', "os.getenv('API_KEY')"]),
)


@settings(max_examples=200, deadline=None)
@given(NAMES, st.sampled_from([" = ", "=", ": ", " := "]), EXPRESSIONS,
       st.sampled_from(["app.py", "notes.md", "settings.yaml", "README.txt", "main.go", "app.js"]))
def test_a_credential_name_given_an_expression_or_a_placeholder_is_never_flagged(
        name, assign, expression, file) -> None:
    line = f"    {name}{assign}{expression}\n"
    assert SCANNER.scan(line, file) == [], line


def test_every_kind_a_detector_reports_is_declared_confirmed_or_loose() -> None:
    kinds = {plugin.secret_type for plugin in SCANNER.plugins} | {rule.kind for rule in SCANNER.extra}
    assert kinds <= set(CONFIDENCE), kinds - set(CONFIDENCE)
    assert set(CONFIDENCE.values()) == {"confirmed", "loose"}


def test_only_confirmed_kinds_and_an_aws_id_beside_its_secret_reject() -> None:
    for case in [*credentials(), *missed()]:
        findings = SCANNER.scan(case.text, case.name)
        assert rejecting(case.text, findings) == [f for f in findings if CONFIDENCE[f.kind] == CONFIRMED]
    aws_id = next(c for c in credentials() if c.kind == "AWS access key id")
    aws_secret = next(c for c in credentials() if c.kind == "AWS secret key")
    both = aws_id.text + aws_secret.text
    assert [f.kind for f in rejecting(both, SCANNER.scan(both, "creds.md"))] == ["AWS Access Key"] * 2
    # `aws iam create-access-key`'s answer: the secret found as a keyword, named an AWS one.
    answer = ('{"AccessKeyId": "AKIAQ2W3E4R5T6Y7U2I3", '
              '"SecretAccessKey": "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"}\n')
    assert [f.kind for f in rejecting(answer, SCANNER.scan(answer, "key.json"))] \
        == ["AWS Access Key", "Secret Keyword"]


def scanned(mode: str, text: str, uri: str = "wiki/page.md", metadata=()) -> list:
    scan = _ScanDocument(CredentialOptions(mode=mode))
    scan.setup()
    return list(scan.process(Document(doc_id=uri, uri=uri, text=text, metadata=metadata)))


def test_in_reject_mode_a_loose_kind_is_masked_and_a_confirmed_one_rejects() -> None:
    loose = next(c for c in credentials() if c.kind == "password in a config")
    [kept] = scanned("reject", loose.text, loose.name)
    assert isinstance(kept, Document) and loose.secret not in kept.text
    assert "[REDACTED Secret Keyword]" in kept.text
    github = next(c for c in credentials() if c.kind == "GitHub token")
    [rejected] = scanned("reject", loose.text + github.text)
    assert rejected.tag == "rejected"
    assert rejected.value.reason == ("holds credentials (2 credentials: Secret Keyword (line 6), "
                                     "GitHub Token (line 8))")
    # A confirmed credential in the metadata alone rejects too.
    [by_metadata] = scanned("reject", "plain text\n", metadata=(("notes", json.dumps(github.text)),))
    assert by_metadata.tag == "rejected"
    [redacted] = scanned("redact", loose.text + github.text)
    assert github.secret not in redacted.text and loose.secret not in redacted.text


def test_a_finding_is_a_plain_record() -> None:
    assert Finding("Private Key", 0, 5, 1) == Finding("Private Key", 0, 5, 1, 0)
