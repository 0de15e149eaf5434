"""``chunkline sync`` into LanceDB (embedded): the cases of ``sync_cases`` on a real table,
edited and searched with lancedb's own client."""

from __future__ import annotations

import lancedb
import numpy as np
import pytest

from tests.pipeline import sync_cases as cases

pytestmark = pytest.mark.slow


def table(uri: str):
    path, _, name = uri.removeprefix("lancedb://").partition("?table=")
    return lancedb.connect(path).open_table(name or "chunks")


@pytest.fixture
def uri(tmp_path) -> str:
    return f"lancedb://{tmp_path}/lance?table=chunks"


def test_full_sync_then_a_second_writes_nothing(uri, sync_runs) -> None:
    cases.check_full_sync_and_idempotence(uri, sync_runs.demo_run)
    indexed = {tuple(i.columns): i.index_type for i in table(uri).list_indices()}
    assert indexed == {("search_text",): "FTS"}  # too few rows for IVF-PQ: said in the report
    hits = table(uri).search("calibration warm-up", query_type="fts").limit(3).to_arrow()
    assert hits.num_rows == 3


def test_reindex_writes_the_changed_chunks_and_deletes_the_gone(uri, sync_runs) -> None:
    cases.check_reindex(uri, sync_runs)


def test_a_killed_sync_resumes(uri, sync_runs) -> None:
    cases.check_crash_then_resume(uri, sync_runs.demo_run, lambda u: table(u).count_rows())


def test_edits_behind_the_tools_back_are_found(uri, sync_runs) -> None:
    def edit(u: str, chunk_id: str, column: str, text: str) -> None:
        table(u).update(where=f"chunk_id = '{chunk_id}'", values={column: text})

    def delete_row(u: str, chunk_id: str) -> None:
        table(u).delete(f"chunk_id = '{chunk_id}'")

    cases.check_edits_behind_the_back(uri, sync_runs.demo_run, edit, delete_row)


def test_exact_dense_search_agrees_with_chunkline_query(uri, sync_runs) -> None:
    def nearest(u: str, vector: np.ndarray) -> str:
        hits = (table(u).search(vector, vector_column_name="vector").distance_type("cosine")
                .bypass_vector_index().limit(1).select(["chunk_id"]).to_arrow())
        return hits.column("chunk_id")[0].as_py()

    cases.check_exact_dense_search(uri, sync_runs.demo_run, nearest)


def test_usage_errors(uri, sync_runs) -> None:
    cases.check_usage_errors(uri, sync_runs.demo_run)


def test_run_with_a_sink_publishes_then_syncs_and_a_rerun_writes_nothing(tmp_path) -> None:
    """`sink:` in the config: `chunkline run` syncs the run it published and verifies it."""
    import io

    import pyarrow.parquet as pq

    from chunkline.pipeline.cli import main
    from tests.pipeline.test_reindex import write_corpus

    corpus, output = tmp_path / "corpus", tmp_path / "index"
    write_corpus(corpus, 6)
    uri = f"lancedb://{tmp_path}/store?table=chunks"
    argv = ["run", "--config", "configs/local.yaml", "--input", f"{corpus}/**", "--output",
            str(output), "--set", f"sink.to={uri}", "--set", "sink.batch_size=7"]
    out, err = io.StringIO(), io.StringIO()
    assert main(argv, out, err) == 0, err.getvalue()
    latest = (output / "LATEST").read_text().strip()
    chunks = sum(pq.read_metadata(p).num_rows for p in (output / latest).glob("chunks-*.parquet"))
    assert table(uri).count_rows() == chunks > 7
    assert f"synced run {latest}" in out.getvalue() and "verified:" in out.getvalue()

    out = io.StringIO()
    assert main(argv, out, io.StringIO()) == 0
    again = (output / "LATEST").read_text().strip()
    assert again != latest
    assert f"synced run {again}" in out.getvalue() and " 0 written, 0 deleted" in out.getvalue()
    assert table(uri).count_rows() == chunks


def test_a_sink_without_vectors_is_a_config_error(tmp_path) -> None:
    from chunkline.pipeline.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="sink needs vectors"):
        load_config("configs/local.yaml", ["embed=null", f"sink.to={tmp_path}/store"])


def test_eight_syncs_at_once_leave_exactly_the_runs_rows(uri, sync_runs, tmp_path) -> None:
    cases.check_concurrent_syncs(uri, sync_runs, tmp_path / "logs")
    assert table(uri).count_rows() == len(cases.parquet_rows(sync_runs.second))


def test_a_duplicate_row_planted_behind_the_tools_back_is_found(uri, sync_runs) -> None:
    def plant(u: str, chunk_id: str) -> None:
        copy = table(u).search().where(f"chunk_id = '{chunk_id}'").limit(1).to_arrow()
        table(u).add(copy)

    cases.check_a_planted_duplicate_is_found(uri, sync_runs.demo_run, plant)


def test_check_on_an_empty_target_writes_nothing(sync_runs, tmp_path) -> None:
    target = tmp_path / "never"
    cases.check_check_writes_nothing(str(target), sync_runs.demo_run, lambda u: not target.exists())


def test_metadata_of_any_json_values_round_trips(uri, sync_runs) -> None:
    cases.check_metadata_round_trips(uri, sync_runs.demo_run)


def test_a_store_of_the_old_row_format_is_rewritten_once_never_drift(uri, odd_run) -> None:
    cases.check_an_old_format_store_is_rewritten_once(uri, odd_run)
