"""chunkline.credentials: generated credentials of fourteen kinds are all found, lookalikes are
not, and redaction keeps every other character and every page start where it belongs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.credentials import MARKER, CredentialOptions, Scanner, describe, redact
from pipeline.config import ConfigError, load_config
from tests.credential_cases import credentials, lookalikes

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
    keyword = scanner.keyword_regexes(name)
    found = []
    for index, start in enumerate(line_starts):
        end = line_starts[index + 1] - 1 if index + 1 < len(line_starts) else len(text)
        line = text[start:end]
        for kind, value in scanner._line_values(line, detectors, keyword):
            for left, right in credentials._spans(line, value):
                if not credentials._EXAMPLE.search(line[left:right]):
                    found.append(credentials.Finding(kind, start + left, start + right, index + 1))
    found = [credentials._whole_private_key(text, f, line_starts) if f.kind == "Private Key" else f
             for f in found]
    return credentials._merged(found, line_starts)


FRAGMENTS = [case.text for case in credentials()] + [case.text for case in lookalikes()] + [
    "api_key: 'Zq8vN2xLp4Tr9sQ1'", 'cloudant_password = "abcdefghijklmnopqrstuvwx"',
    "ibm_cloud_iam_key: " + "a1B2" * 11, "mailchimp 0123456789abcdef0123456789abcdef-us12",
    "İstanbul KEY=Zq8vN2xLp4Tr9sQ1x ", "plain prose about the arm\n", "\n", "  "]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8), st.sampled_from(["a.md", "c.yaml", "x.py"]))
def test_screening_finds_what_asking_every_detector_on_every_line_finds(parts, name) -> None:
    text = " ".join(parts)
    assert SCANNER.scan(text, name) == naive_scan(SCANNER, text, name)
