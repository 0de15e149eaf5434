"""Generated credentials (none real: random characters in each provider's published format) and
lookalikes that are not credentials, each in a sentence as a wiki page, ticket or config file
would hold it. Shared by tests/test_credentials.py, the pipeline test and bench/secrets_bench.py.
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass

UPPER_DIGITS = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Case:
    name: str  # the file the text is written to
    text: str
    secret: str  # the credential's value ("" for a lookalike): it must never reach an output
    kind: str  # what it is, in words


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _pem(rng: random.Random, label: str) -> str:
    body = base64.b64encode(rng.randbytes(600)).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])


def credentials(seed: int = 7) -> list[Case]:
    """Twenty credentials of fourteen kinds."""
    rng = random.Random(seed)
    aws_id = "AKIA" + _pick(rng, UPPER_DIGITS, 16)
    aws_secret = _pick(rng, ALNUM + "/+", 40)
    github = "ghp_" + _pick(rng, ALNUM, 36)
    gitlab = "glpat-" + _pick(rng, ALNUM + "_-", 20)
    slack = f"xoxb-{_pick(rng, string.digits, 12)}-{_pick(rng, string.digits, 13)}-{_pick(rng, ALNUM, 24)}"
    stripe = "sk_live_" + _pick(rng, ALNUM, 24)
    rsa = _pem(rng, "RSA PRIVATE KEY")
    openssh = _pem(rng, "OPENSSH PRIVATE KEY")
    db_password = _pick(rng, ALNUM, 14)
    jwt = ".".join([_b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()),
                    _b64url(json.dumps({"sub": _pick(rng, string.digits, 8), "role": "admin",
                                        "iat": 1700000000 + rng.randrange(10 ** 6)}).encode()),
                    _b64url(rng.randbytes(32))])
    google = "AIza" + _pick(rng, ALNUM + "_-", 35)
    sendgrid = f"SG.{_pick(rng, ALNUM, 22)}.{_pick(rng, ALNUM, 43)}"
    openai = "sk-proj-" + _pick(rng, ALNUM, 56)
    hugging = "hf_" + _pick(rng, string.ascii_letters, 34)
    twilio = "SK" + _pick(rng, HEX, 32)
    npm = "npm_" + _pick(rng, ALNUM, 36)
    config_password = _pick(rng, ALNUM + "!#%", 16)
    mssql = _pick(rng, ALNUM, 12) + "!"
    azure = base64.b64encode(rng.randbytes(64)).decode()
    telegram = f"{rng.randrange(10 ** 8, 10 ** 9)}:AA{_pick(rng, ALNUM + '_-', 33)}"
    return [
        Case("aws-id.md", f"# Deploy\n\nThe CI user's access key is {aws_id}; rotate it monthly.\n", aws_id, "AWS access key id"),
        Case("aws-secret.md", f"# Deploy\n\n```sh\nexport AWS_SECRET_ACCESS_KEY=\"{aws_secret}\"\n```\n", aws_secret, "AWS secret key"),
        Case("github.md", f"Ticket 4411: the release job failed; I pasted my token {github} into the runner settings.\n", github, "GitHub token"),
        Case("gitlab.md", f"Mirror with `git clone https://oauth2:{gitlab}@gitlab.example.org/team/app.git`.\n", gitlab, "GitLab token"),
        Case("slack.md", f"# Alerts\n\nThe bot posts with {slack} into #ops.\n", slack, "Slack token"),
        Case("stripe.md", f"Billing moved to the live key {stripe} on Monday.\n", stripe, "Stripe live key"),
        Case("rsa.md", f"# Server access\n\nUse this key:\n\n{rsa}\n\nThen connect as deploy.\n", rsa, "RSA private key"),
        Case("openssh.md", f"Notes from the migration.\n\n{openssh}\n\nThe old host is gone.\n", openssh, "OpenSSH private key"),
        Case("postgres.md", f"The reporting DB is postgresql://report:{db_password}@db.internal:5432/reports.\n", db_password, "database URI password"),
        Case("jwt.md", f"Support replayed the request with `Authorization: Bearer {jwt}` and it worked.\n", jwt, "JSON web token"),
        Case("google.md", f"Maps widget: set GOOGLE_MAPS_KEY to {google} in the front end.\n", google, "Google API key"),
        Case("sendgrid.md", f"Mail goes out through SendGrid ({sendgrid}).\n", sendgrid, "SendGrid key"),
        Case("openai.md", f"The summarizer reads OPENAI_API_KEY={openai} from its unit file.\n", openai, "OpenAI key"),
        Case("hugging.md", f"Download the gated model with the token {hugging}.\n", hugging, "Hugging Face token"),
        Case("twilio.md", f"SMS: Twilio API key {twilio}, region us1.\n", twilio, "Twilio key"),
        Case("npm.md", f"Publishing needs `//registry.npmjs.org/:_authToken={npm}` in .npmrc.\n", npm, "npm token"),
        Case("config.yaml.md", f"# Settings\n\n```yaml\ndatabase:\n  user: app\n  password: \"{config_password}\"\n```\n", config_password, "password in a config"),
        Case("mssql.md", f"Connection: `Server=sql01;Database=crm;User Id=sa;Password={mssql};`\n", mssql, "connection string password"),
        Case("azure.md", f"Storage: DefaultEndpointsProtocol=https;AccountName=reports;AccountKey={azure};EndpointSuffix=core.windows.net\n", azure, "Azure storage key"),
        Case("telegram.md", f"The release bot's token is {telegram}.\n", telegram, "Telegram bot token"),
    ]


def lookalikes(seed: int = 11) -> list[Case]:
    """Twenty strings that look like credentials and are not."""
    rng = random.Random(seed)
    sha1 = _pick(rng, HEX, 40)
    sha256 = _pick(rng, HEX, 64)
    md5 = _pick(rng, HEX, 32)
    uuid = f"{_pick(rng, HEX, 8)}-{_pick(rng, HEX, 4)}-4{_pick(rng, HEX, 3)}-a{_pick(rng, HEX, 3)}-{_pick(rng, HEX, 12)}"
    texts = [
        f"Fixed in commit {sha1} (see the changelog).",
        f"Request {uuid} timed out after 30 s.",
        f'The archive\'s checksum is sha256 "{sha256}".',
        f'md5 = "{md5}"  # of the empty file',
        "AWS's documentation uses the key AKIAIOSFODNN7EXAMPLE with secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY.",
        "jwt.io's sample token is eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        'password = os.environ["DB_PASSWORD"]',
        'api_key = "<your-api-key>"',
        'token: "${GITHUB_TOKEN}"',
        f"Pull the image by digest: registry.example.org/app@sha256:{_pick(rng, HEX, 64)}",
        "The build id is 20241204.3 and the version 4.12.0-rc.1.",
        f"Order ORD-{_pick(rng, UPPER_DIGITS, 10)} shipped to 10.0.4.17.",
        f"Our public SSH key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{_pick(rng, ALNUM, 43)} deploy@ci",
        f"The pixel is data:image/png;base64,iVBORw0KGgo{_pick(rng, ALNUM, 60)}",
        "Set the secret in the vault, never in this page: `vault kv put secret/app password=...`.",
        f"Trace id {_pick(rng, HEX, 32)}, span {_pick(rng, HEX, 16)}.",
        "Colors: #1f77b4 #ff7f0e #2ca02c #d62728 #9467bd.",
        'password: "changeme"  # the installer asks for a new one',
        f"Bitcoin donations: bc1q{_pick(rng, string.ascii_lowercase + string.digits, 38)}",
        f"git checkout {sha1[:12]} && make",
    ]
    return [Case(f"lookalike-{i:02d}.md", f"# Note {i}\n\n{text}\n", "", "lookalike")
            for i, text in enumerate(texts)]


def missed(seed: int = 13) -> list[Case]:
    """Ten forms the review of issue #48 found indexed as they were: each a credential."""
    rng = random.Random(seed)
    fine_grained = f"github_pat_{_pick(rng, ALNUM, 22)}_{_pick(rng, ALNUM, 59)}"
    basic = base64.b64encode(f"svc-export:{_pick(rng, ALNUM, 16)}".encode()).decode()
    bearer = _pick(rng, ALNUM, 40)
    sas = base64.b64encode(rng.randbytes(32)).decode().replace("+", "%2B").replace("/", "%2F") \
        .replace("=", "%3D")
    mysql = _pick(rng, ALNUM, 14)
    dotnet = _pick(rng, ALNUM + "!#%", 16)
    mailgun = "key-" + _pick(rng, HEX, 32)
    aws_id = "AKIA" + _pick(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    docker = base64.b64encode(f"ci-bot:{_pick(rng, ALNUM, 20)}".encode()).decode()
    redis = _pick(rng, ALNUM, 18)
    sas_url = ("https://reports.blob.core.windows.net/exports/q3.csv?sv=2022-11-02&ss=b&srt=o&sp=r"
               f"&se=2025-01-01T00:00:00Z&spr=https&sig={sas}")
    return [
        Case("fine-grained.md", f"The nightly sync authenticates with {fine_grained}; it expires in May.\n", fine_grained, "GitHub fine-grained token"),
        Case("basic.md", f"```http\nGET /rest/api/2/search HTTP/1.1\nHost: jira.internal\nAuthorization: Basic {basic}\n```\n", basic, "Authorization: Basic"),
        Case("bearer-log.txt", f"10:11:02 DEBUG request headers: Accept: application/json, Authorization: Bearer {bearer}\n", bearer, "Authorization: Bearer"),
        Case("sas.md", f"Finance downloads the export from {sas_url} until January.\n", sas, "Azure SAS signature"),
        Case("mysql.md", f"Restore with:\n\n    mysql -h db01 -u root -p{mysql} crm < dump.sql\n", mysql, "mysql -p password"),
        Case("web-config.md", f'Web.config:\n\n```xml\n<configuration>\n  <appSettings>\n    <add key="DbPassword" value="{dotnet}" />\n  </appSettings>\n</configuration>\n```\n', dotnet, ".NET config password"),
        Case("mailgun-env.md", f"```sh\nMAILGUN_DOMAIN=mg.example.org\nMAILGUN_KEY={mailgun}\n```\n", mailgun, "Mailgun key"),
        Case("wrapped.py", f'client = boto3.client(\n    "s3",\n    aws_access_key_id=("{aws_id[:10]}"\n                       "{aws_id[10:]}"),\n)\n', aws_id, "AWS key id over two lines"),
        Case("dockerconfigjson.md", "The pull secret's .dockerconfigjson:\n\n```json\n" + json.dumps({"auths": {"registry.internal:5000": {"auth": docker}}}, indent=2) + "\n```\n", docker, "docker registry auth"),
        Case("redis.md", f"Sessions live in `redis://:{redis}@cache.internal:6379/0`.\n", redis, "Redis URI password"),
    ]


def spared() -> list[Case]:
    """Code and prose that name credentials and hold none: each must index as it is."""
    texts = [
        ("python_rsa.py", '_PKCS1_MARKER = ("-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----")\n'
                          '_PKCS8_MARKER = ("-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----")\n'),
        ("gdch.py", '    "private_key": "-----BEGIN EC PRIVATE KEY-----\\n<key bytes>\\n-----END EC PRIVATE KEY-----\\n",\n'),
        ("mtls.py", '# "-----BEGIN PRIVATE KEY-----...",\n# "-----BEGIN EC PRIVATE KEY-----...",\n'),
        ("prompt.py", '    password = Prompt.ask(\n        "Please enter a password", password=True,\n    )\n'),
        ("rsa_key.py", "    private_key = rsa.key.PrivateKey.load_pkcs1(\n        info.asOctets(), format=\"DER\"\n    )\n"),
        ("keys.md", "The file starts with the line\n\n    -----BEGIN RSA PRIVATE KEY-----\n\nand ends with the matching END line.\n"),
        ("abstracts.txt", "Familial adenomatous polyposis is caused by germline mutations of the\n"
                          "APCadenomatous polyposis coli\ngene on chromosome 5q21.\n"),
        ("snippet.md", "```python\npassword = getpass.getpass()\ntoken = os.environ.get(\"TOKEN\")\n"
                       "secret = kwargs[\"secret\"]\n```\n"),
        ("curl.md", "curl -H \"Authorization: Bearer $TOKEN\" https://api.example.org/v1/items\n"
                    "curl -H 'Authorization: Basic <base64 user:pass>' https://api.example.org\n"),
        ("mysql.md", "Connect with `mysql -u root -p` and type the password when asked; "
                     "scripts use `mysql -u app -p$MYSQL_PWD`.\n"),
        ("app.config", '<add key="PasswordMinLength" value="12345678" />\n'
                       '<add key="DbPassword" value="%DB_PASSWORD%" />\n'),
        ("wrap.py", 'message = ("The access key id starts with AKIA and "\n           "is 20 characters long.")\n'),
        # Found in site-packages by bench/secrets_fp_bench.py:
        ("font.py", '    b"EQQ/BCQvEjQCFQZWFSEWQv40AcxCDiUblhASIAQAAAAAAAAAAAAAAWAQ4AAQAAAAAAAAATACgAAQ"\n'),
        ("appengine.py", "        client_id='837...ent.com',\n        client_secret='Qh...wwI',\n"),
        ("pyodbc.py", '    connection_string = "DRIVER={SQL Server Native Client 10.0};SERVER=dagger;'
                      'DATABASE=test;UID=user;PWD=password"\n'),
        ("models.py", '              "projects/12345/global/networks/myVPC". Private services access must\n'),
    ]
    return [Case(name, text, "", "spared") for name, text in texts]
