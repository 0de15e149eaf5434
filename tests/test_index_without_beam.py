"""Reading an index needs no Beam (issue 50): ``chunkline.index.search.Index`` opens and searches
a run, local and on ``gs://`` (the storage emulator), in a process where ``apache_beam`` cannot
be imported; and importing it costs a fraction of Beam's import.

Each search runs in a fresh interpreter whose first act is to make ``apache_beam`` unimportable
(a ``sys.meta_path`` finder that raises for it and records the attempt), so nothing imported on
the way, ours or a dependency's, can reach Beam unseen. The demo index is the session's shared,
read-only one (tests/conftest.py); the gs:// case reads a copy of it uploaded to the emulator.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from chunkline.index.layout import RUN_ID, format_run_id
from tests.gcs_emulator import storage_emulator, upload_tree

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "chunkline-no-beam"
QUESTION = "how long should the arm warm up before calibration?"
pytestmark = pytest.mark.slow

NO_BEAM = r'''
import sys


class NoBeam:
    """Beam as if not installed, and every attempt to import it recorded."""

    tried = []

    def find_spec(self, name, path=None, target=None):
        if name == "apache_beam" or name.startswith("apache_beam."):
            NoBeam.tried.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None


sys.meta_path.insert(0, NoBeam())
'''

SEARCH = NO_BEAM + r'''
import json

from chunkline.index.manifest import complete_runs, latest_run
from chunkline.index.query import search_result
from chunkline.index.search import Index

output, question = sys.argv[1], sys.argv[2]
index = Index.open(output)
results = {mode: index.search(question, k=3, mode=mode) for mode in ("hybrid", "dense", "sparse")}
results["one-shot"] = search_result(output, question, k=3, expand=200)
print(json.dumps({
    "run_dir": index.run_dir, "chunks": len(index), "latest": latest_run(output),
    "complete": complete_runs(output),
    "hits": {mode: [[h.chunk_id, h.score, h.text, h.expanded_text] for h in result.hits]
             for mode, result in results.items()},
    "rankings": {mode: result.ranking for mode, result in results.items()},
    "beam_loaded": "apache_beam" in sys.modules, "tried": NoBeam.tried,
}))
'''

# Peak RSS as proc(5)'s VmHWM, the high-water mark of this program's own memory: getrusage's
# ru_maxrss is kept across fork and exec on Linux, so a child of a 200 MB pytest reports 200 MB.
IMPORT_COST = r'''
import re, sys, time
started = time.perf_counter()
for name in sys.argv[1:]:
    __import__(name)
seconds = time.perf_counter() - started
with open("/proc/self/status") as status:
    peak = int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1)) / 1024
print(seconds, peak, "apache_beam" in sys.modules)
'''


def run_python(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the working tree, whatever the cwd
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def search_without_beam(output: str) -> dict:
    done = run_python(SEARCH, output, QUESTION)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["beam_loaded"] is False and found["tried"] == [], found["tried"]
    return found


@pytest.fixture(scope="module")
def local_output(demo_index, tmp_path_factory) -> Path:
    """A copy of the shared demo index (never written into)."""
    copy = tmp_path_factory.mktemp("no-beam") / "index"
    shutil.copytree(demo_index.output, copy)
    return copy


@pytest.fixture(scope="module")
def local_result(local_output) -> dict:
    return search_without_beam(str(local_output))


def test_a_local_index_is_opened_and_searched_without_beam(local_output, local_result) -> None:
    run_id = (local_output / "LATEST").read_text().strip()
    assert local_result["run_dir"] == str(local_output / run_id) == local_result["latest"]
    assert local_result["complete"] == [local_result["run_dir"]]
    assert local_result["chunks"] > 0
    assert local_result["rankings"] == {"hybrid": "hybrid", "dense": "dense", "sparse": "sparse",
                                        "one-shot": "hybrid"}
    for mode, hits in local_result["hits"].items():
        assert len(hits) == 3, mode
    assert "calibrat" in local_result["hits"]["dense"][0][2].lower()
    assert all(expanded for *_, expanded in local_result["hits"]["one-shot"])


CLI = NO_BEAM + r'''
import io
from contextlib import redirect_stdout

from chunkline.pipeline.cli import main

out, err = io.StringIO(), io.StringIO()
with redirect_stdout(out):
    try:
        status = main(sys.argv[1:], out, err)
    except SystemExit as exit:  # --help
        status = exit.code
print(status, json.dumps([out.getvalue(), err.getvalue(), NoBeam.tried]))
'''


def test_the_commands_that_read_an_index_start_without_beam(local_output) -> None:
    """``chunkline query`` (a search service's command) neither needs Beam nor pays for importing
    it, and no other command's arguments make it (``report``'s are read with the parser)."""
    for argv, expected in ((["query", str(local_output), QUESTION, "-k", "2", "--json"], '"chunk_id"'),
                           (["report", "--help"], "--run RUN_ID")):
        done = run_python("import json\n" + CLI, *argv)
        assert done.returncode in (0, 1) and done.stdout, (argv, done.stderr[-2000:])
        status, payload = done.stdout.strip().splitlines()[-1].split(" ", 1)
        printed, errors, tried = json.loads(payload)
        assert tried == [], (argv, tried)
        if argv[1] != "--help":
            assert status == "0", (argv, errors)
        assert expected in printed + errors, (argv, printed[-500:], errors[-500:])


def test_a_gcs_index_is_opened_and_searched_without_beam(local_output, local_result) -> None:
    with storage_emulator(BUCKET):
        upload_tree(local_output, f"gs://{BUCKET}/index")
        output = f"gs://{BUCKET}/index"
        found = search_without_beam(output)
        run_id = (local_output / "LATEST").read_text().strip()
        assert found["run_dir"] == f"{output}/{run_id}" == found["latest"]
        assert found["complete"] == [found["run_dir"]]
        # The same run read from the bucket ranks as it does from the disk, to the bit.
        assert found["hits"] == local_result["hits"] and found["chunks"] == local_result["chunks"]

        # A shard the manifest lists but the bucket lacks: the one-line error a local run gives.
        from google.cloud import storage

        from chunkline.index.search import Index

        bucket = storage.Client.create_anonymous_client().bucket(BUCKET)
        shard = sorted(b.name for b in bucket.list_blobs(prefix=f"index/{run_id}/chunks-"))[0]
        bucket.blob(shard).delete()
        with pytest.raises(ValueError) as missing:
            Index.open(output)
        assert str(missing.value) == f"gs://{BUCKET}/{shard}: no such file, though the run's manifest lists it"


def test_a_model_on_gcs_is_fetched_into_the_copy_the_workers_use(tmp_path) -> None:
    """The query side fetches a gs:// model without Beam, into the same cache entry (same
    digest of the listing) as the workers' Beam-based fetch, so one machine holds one copy."""
    from chunkline.index.models import local_model_dir
    from chunkline.transforms import model_cache

    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "weights.bin.gz").write_bytes(b"\x1f\x8b not really gzip")
    with storage_emulator(BUCKET):
        upload_tree(model, f"gs://{BUCKET}/models/tiny")  # Beam gzips a .gz name as it writes
        ours = local_model_dir(f"gs://{BUCKET}/models/tiny/", tmp_path / "cache")
        theirs = model_cache.local_model_dir(f"gs://{BUCKET}/models/tiny/", tmp_path / "cache")
        from google.cloud import storage

        stored = (storage.Client.create_anonymous_client().bucket(BUCKET)
                  .blob("models/tiny/sub/weights.bin.gz").download_as_bytes(raw_download=True))
    assert ours == theirs
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [Path(ours).name]
    assert (Path(ours) / "sub" / "weights.bin.gz").read_bytes() == stored  # as stored, not inflated
    assert (Path(ours) / "config.json").read_text() == "{}"


def test_importing_the_read_side_costs_a_fraction_of_beam() -> None:
    def cost(*modules: str) -> tuple[float, float, bool]:
        done = run_python(IMPORT_COST, *modules)
        assert done.returncode == 0, done.stderr
        seconds, rss, beam = done.stdout.split()
        return float(seconds), float(rss), beam == "True"

    # Best of two each, alternated: the machine is shared and one import can be held up.
    # The pipeline's modules of the same names are re-exports: as cheap, and as free of Beam.
    read_side = ("chunkline.index.search", "chunkline.index.query", "chunkline.pipeline.search",
                 "chunkline.pipeline.query", "chunkline.pipeline.manifest")
    index = [cost(*read_side) for _ in range(2)]
    beam = [cost("apache_beam.io.filesystems") for _ in range(2)]
    assert not any(b for *_, b in index) and all(b for *_, b in beam)
    index_seconds, index_rss = min(s for s, *_ in index), min(r for _, r, _ in index)
    beam_seconds, beam_rss = min(s for s, *_ in beam), min(r for _, r, _ in beam)
    print(f"import {', '.join(read_side)}: {index_seconds:.2f} s, {index_rss:.0f} MB; "
          f"apache_beam.io.filesystems: {beam_seconds:.2f} s, {beam_rss:.0f} MB")
    assert index_rss < 0.7 * beam_rss
    assert index_seconds < 0.8 * beam_seconds


def test_run_ids_are_written_as_they_are_read() -> None:
    run_id = format_run_id(datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc), "0123abcd", "a1b2c3")
    assert run_id == "20240506T070809Z-0123abcd-a1b2c3"
    assert RUN_ID.fullmatch(run_id).group(1) == "20240506T070809"
