"""Assemble the job graph: read -> dedupe -> split -> embed -> write, from a validated config."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from chunkline.carry import CARRY_TABLE, carry_row, carry_schema
from chunkline.credentials import ALLOW
from chunkline.index.layout import CACHE
from chunkline.readers import input_root
from chunkline.state import STATE_TABLE, StateRow, StateSource, state_schema, state_source, state_shard_key, state_sort_key, state_to_row
from chunkline.records import (
    REJECTED,
    ChunkRecord,
    DocumentStatus,
    Rejected,
    chunk_row,
    chunk_schema,
    document_schema,
    rejected_schema,
)
from chunkline.pipeline.config import Config
from chunkline.pipeline.options import stage_options
from chunkline.pipeline.plan import Plan
from chunkline.transforms.access import AssignPrincipals
from chunkline.key_sets import KeySets, read_frequent
from chunkline.records import Document
from chunkline.transforms.clean import (CleanDocuments, RemoveBoilerplate, StripLate, WriteFrequentKeys,
                                        WriteRemovedLines)
from chunkline.transforms.credentials import ScanCredentials
from chunkline.transforms.dedupe import Dedupe, UniqueRejectedIds
from chunkline.transforms.read import ReadDocuments, ReadPlaces
from chunkline.transforms.settle import (DOCUMENT_IDS, PLACES, REACHED, REDECIDED, STATE_IDS, Affected,
                                         FlagBoilerplate, ReachedPlaces, SettledOutputs, Touches,
                                         WriteSignature, rejected_touch, settled_mask, settled_rows)
from chunkline.pipeline.plan import SETTLE_SIGNATURE
from apache_beam.pvalue import AsList, AsSingleton
from chunkline.transforms.reuse import (
    ContentKeys,
    LateContentKeys,
    ReuseForDocuments,
    ReusePreviousEmbeddings,
)
from chunkline.transforms.coders import statuses_table
from chunkline.transforms.carry import (CarriedRows, CarriedShards, CarryIndex, CarryKeys, SetCarryKeys,
                                        VerifyPairs)
from chunkline.transforms.spill import spill_dir
from chunkline.transforms.split import FlattenChunks, SplitDocuments
from chunkline.index.compaction import Compaction
from chunkline.transforms.write import Sidecar, WriteParquetShards, shard_of


# Each run keeps the per-document state table (chunkline/state.py), and a rerun under the same
# settle signature passes its unchanged documents by on it (transforms/settle.py; docs/
# ARCHITECTURE.md, "A rerun whose work follows the change"). Off: every document is processed
# every night, as before the table existed.
KEEP_STATE = True


def _rejected_status(record: Rejected) -> DocumentStatus:
    return DocumentStatus(record.doc_id, record.uri, "", "", REJECTED, None)


def context_cache_dir(config: Config) -> str:
    """Next to the index, shared by every run that writes there: a rerun pays for no header twice."""
    return FileSystems.join(config.output.path, CACHE, "context")


def ocr_cache_dir(config: Config) -> str:
    """Next to the index too: a nightly rerun reads an unchanged scanned page by OCR once."""
    return FileSystems.join(config.output.path, CACHE, "ocr")


def _vector_dim(plan: Plan) -> int:
    """The vectors' width, which the plan derives whenever embedding is on (previous vectors
    are reused only then)."""
    if plan.dim is None:
        raise ValueError("embedding is on, but the plan holds no vector width")
    return plan.dim


def build(pipeline: beam.Pipeline, config: Config, plan: Plan) -> None:
    """Add the whole job to ``pipeline``; every document read ends in the documents table."""
    stages = plan.options if plan.options is not None else stage_options(config)
    # The output root may sit inside the input pattern (out/ under the corpus): never read back.
    carry = plan.carry
    previous_state = state_source(plan.previous_state) if KEEP_STATE else None
    # A rerun under the previous run's settle signature passes its unchanged documents by
    # (transforms/settle.py): they reach no per-document stage unless a change reaches them.
    settling = (previous_state is not None and plan.settle_from is not None and carry is not None
                and plan.access is None)
    read_options: dict[str, Any] = dict(
        ocr_cache=ocr_cache_dir(config) if stages.read.ocr.mode != "never" else None,
        trusted=plan.memo if config.input.trust_file_metadata else None,
        credentials=stages.credentials, memo=plan.memo)
    # The output root may sit inside the input pattern (out/ under the corpus): never read back.
    read = pipeline | "Read" >> ReadDocuments(
        config.input.pattern, stages.read,
        follow_symlinks=config.input.follow_symlinks, exclude=(config.output.path,),
        shares=plan.join_shares, **read_options,
        state=previous_state, settle=settling)
    rejected_parts = [read.rejected]

    def cleaned(documents, prefix: str = ""):
        """Clean, then credentials: what every document passes before boilerplate counts it."""
        parts = []
        if stages.clean is not None:
            done = documents | f"{prefix}Clean" >> CleanDocuments(stages.clean, plan.memo)
            documents = done.documents
            parts.append(done.rejected)
        # Before anything counts, compares, sends or stores the text: a credential is rejected or
        # redacted here, so boilerplate keys, MinHash signatures, context requests and every file
        # see only what may be kept.
        if stages.credentials.mode != ALLOW:
            scanned = documents | f"{prefix}Credentials" >> ScanCredentials(stages.credentials, plan.memo)
            documents = scanned.documents
            parts.append(scanned.rejected)
        return documents, parts

    # Clean, then drop corpus boilerplate, then dedupe: duplicates are judged on the text that
    # is chunked, and the documents table stores exactly the text chunk offsets refer to.
    documents, parts = cleaned(read.documents)
    rejected_parts += parts
    counting = None
    if stages.boilerplate is not None:
        settled_keys = (read.settled
                        | "SettledKeys" >> beam.FlatMap(lambda batch: [batch.keys] if batch.keys is not None else [])
                        .with_output_types(KeySets)) if settling else None
        counting = RemoveBoilerplate(stages.boilerplate, spill_dir(plan.run_dir, "boilerplate"), plan.memo,
                                     plan.join_shares, settled=settled_keys)
        stripped = documents | "Boilerplate" >> counting
        documents = stripped.documents
        rejected_parts.append(stripped.rejected)
        stripped.removed | "WriteBoilerplateLines" >> beam.ParDo(WriteRemovedLines(plan.run_dir))
        # The run's frequent keys, for the next run to compare its own with.
        stripped.frequent | "WriteBoilerplateKeys" >> beam.ParDo(WriteFrequentKeys(plan.run_dir))
    # Who may read each document, decided once before dedupe, which never merges documents
    # that different principals may read; a malformed principal is a rejected document.
    if plan.access is not None:
        assigned = documents | "Access" >> AssignPrincipals(plan.access)
        documents = assigned.documents
        rejected_parts.append(assigned.rejected)
    verified = pipeline | "VerifyCarry" >> VerifyPairs(carry) if carry is not None else None
    settled = None
    if settling and verified is not None and previous_state is not None:
        settled, documents = _settle(pipeline, config, plan, stages, read, documents, rejected_parts,
                                     counting, cleaned, read_options, verified.damaged, previous_state)
    # The documents passed by leave the carry index as arrays per pair: only the others meet
    # a decision by id (transforms/carry.py).
    carry_index = (verified.pairs | "CarryIndex" >> CarryIndex(carry, settled.redecided if settled is not None else None)
                   if verified is not None and carry is not None else None)
    # An id conflict's rejected row names its file relative to the input root, as every id does.
    # A kept document whose rows the previous run made under the same carry key is not
    # released to the splitter: its chunks come from that run (transforms/carry.py).
    deduped = documents | "Dedupe" >> Dedupe(config.dedupe.exact, stages.near_duplicates,
                                             spill_dir(plan.run_dir, "dedupe"),
                                             roots=(input_root(config.input.pattern),),
                                             carry_keys=CarryKeys(carry) if carry is not None else None,
                                             carry_index=carry_index, memo=plan.memo,
                                             access=plan.access is not None, shares=plan.join_shares,
                                             keep_state=KEEP_STATE)
    # Carried rows never travel one per chunk: their shard writer reads them as Arrow tables.
    carried_ids = deduped.carried
    if carried_ids is not None and carry_index is not None and carry_index.carried is not None:
        carried_ids = (carried_ids, carry_index.carried) | "AllCarried" >> beam.Flatten()
    carried = (carried_ids | "Carried" >> CarriedShards(carry, config.output.chunk_shards, shard_of,
                                                        plan.join_shares)
               if carry is not None and carried_ids is not None else None)
    # One element per document, its chunks with it, until they are flattened once before reuse
    # and embed: the stages between need a chunk's whole document and never re-join it by id.
    split = deduped.kept | "Split" >> SplitDocuments(
        plan.tokenizer_spec,
        plan.max_tokens,
        config.split.overlap,
        config.split.markdown,
        heading_reserve=config.split.heading_reserve,
        code=config.split.code,
        semantic=stages.semantic,
        semantic_model=stages.embed if stages.semantic is not None else None,
        max_chars=config.split.max_chars,
        merge_sections_below=config.split.merge_sections_below,
        chunk_metadata=(tuple(config.output.chunk_metadata)
                        if config.output.chunk_metadata is not None else None),
    )
    if stages.context is not None:
        from chunkline.transforms.context import ContextualHeaders  # the LLM SDKs load only when on

        split = split | "Context" >> ContextualHeaders(
            stages.context, context_cache_dir(config), plan.run_dir.rstrip("/").rsplit("/", 1)[-1],
            plan.tokenizer_spec,
        )
    if carry is not None:
        split = split | "CarryKeys" >> SetCarryKeys(carry)
    options = stages.embed
    if options is not None and stages.late is not None:
        # Late chunking reads each chunk's whole document: reuse and embed on the elements.
        from chunkline.transforms.late_embed import LateEmbedChunks  # torch loads only when embedding is on

        split = split | "ContentKey" >> LateContentKeys(plan.embedding_signature)
        if plan.previous_files:
            split = split | "Reuse" >> ReuseForDocuments(plan.previous_files, _vector_dim(plan), plan.normalize)
        chunks = split | "Embed" >> LateEmbedChunks(options, stages.late) | "Chunks" >> FlattenChunks()
    else:
        chunks = split | "ContentKey" >> ContentKeys(plan.embedding_signature) | "Chunks" >> FlattenChunks()
        if options is not None:
            from chunkline.transforms.embed import EmbedChunks  # torch loads only when embedding is on

            to_embed = chunks
            if plan.previous_files:
                reuse = chunks | "Reuse" >> ReusePreviousEmbeddings(
                    plan.previous_files, _vector_dim(plan), plan.normalize)
                to_embed = reuse.missing
            embedded = to_embed | "Embed" >> EmbedChunks(options)
            chunks = ((reuse.reused, embedded) | "ReusedAndEmbedded" >> beam.Flatten()
                      if plan.previous_files else embedded)

    rejected = (
        (deduped.statuses, (*rejected_parts, deduped.rejected) | "AllRejected" >> beam.Flatten())
        | "UniqueIds" >> UniqueRejectedIds(plan.join_shares)
    )
    # Two inputs, not a Flatten: the kept and duplicate statuses carry their text, and each
    # goes to part files where it is made.
    statuses = (deduped.statuses, rejected | "RejectedStatus" >> beam.Map(_rejected_status))

    weigh, weights = {}, None
    if stages.sparse is not None:
        from chunkline.transforms.sparse import BM25Weights, SparseCounts, WriteStats, WriteTerms

        # The document frequencies are combined per share of the term space, one terms file
        # each, as many as the chunks' files: no worker holds the corpus's vocabulary.
        term_shares = config.output.chunk_shards
        sparse = (((chunks, carried.stats) if carried is not None else chunks)
                  | "Sparse" >> SparseCounts(stages.sparse, term_shares))
        chunks = sparse.chunks
        # Weights need the whole run's statistics: applied as each shard is written, so the
        # chunks wait in their part files rather than in memory.
        weights = BM25Weights(stages.sparse, plan.bm25_reference)
        # The stored weights need the corpus's chunk count and summed length, never its document
        # frequencies: the statistics hold none, so the side input is a few bytes.
        weigh = {"finish": weights, "finish_input": sparse.stats}
        sparse.stats | "WriteBm25Stats" >> beam.ParDo(
            WriteStats(plan.run_dir, stages.sparse, plan.bm25_reference))
        # A file per share of the term space: a term is never an element of its own.
        sparse.terms | "WriteTerms" >> beam.ParDo(WriteTerms(plan.run_dir, term_shares, plan.previous_terms))

    schema = chunk_schema(plan.dim, config.output.vector_dtype, principals=plan.access is not None)
    merge = ({"carried": carried.parts, "sort_columns": ("doc_id", "chunk_index"),
              "carried_rows": CarriedRows(carry, schema, carry_schema(), weights)}
             if carried is not None and carry is not None else {})
    chunks | "WriteChunks" >> WriteParquetShards(
        plan.run_dir, "chunks", schema,
        config.output.chunk_shards, record_type=ChunkRecord, to_row=chunk_row,
        shard_key=lambda r: r.doc_id, sort_key=lambda r: (r.doc_id, r.chunk_index), **weigh,
        sidecar=Sidecar(CARRY_TABLE, carry_schema(), carry_row) if carry is not None else None,
        **merge,
    )
    statuses | "WriteDocuments" >> WriteParquetShards(
        plan.run_dir, "documents", document_schema(principals=plan.access is not None),
        config.output.document_shards,
        record_type=DocumentStatus,
        shard_key=lambda r: r.doc_id, sort_key=lambda r: (r.doc_id, r.uri, r.status),
        # A shard whose rows are the previous run's (a rerun where nothing in it changed) is
        # referenced, not encoded and compressed again; of one where some changed, only the
        # changed rows are written (merge-on-read by row).
        previous=(carry.signature, carry.document_files()) if carry is not None else None,
        # Compaction spread over runs: the files the plan allows (its most dead, within a budget).
        compactable=carry.compactable if carry is not None else None,
        # The documents passed by keep their rows where they lie: only the redecided ones' go.
        keep=settled.document_ids if settled is not None else None,
        # The text, most of the table, goes to Arrow as the UTF-8 its records hold.
        to_table=statuses_table,
    )
    # What the corpus-wide stages decided on, by the place each document was read, so that a
    # rerun finds an unchanged document's part where it reads it (chunkline/state.py).
    if deduped.state is not None:
        deduped.state | "WriteState" >> WriteParquetShards(
            plan.run_dir, STATE_TABLE, state_schema(principals=plan.access is not None),
            config.output.document_shards, shard_key=state_shard_key, sort_key=state_sort_key,
            to_row=state_to_row, record_type=StateRow,
            previous=(carry.signature, plan.previous_state) if carry is not None else None,
            keep=settled.state_ids if settled is not None else None,
            # Its rows name documents (places, ids): an erasing run keeps no dead one.
            compactable=Compaction(purge=True) if plan.erase else None,
        )
        (pipeline
         | "SettleSignature" >> beam.Create([plan.settle_signature])
         | "WriteSettleSignature" >> beam.ParDo(WriteSignature(plan.run_dir, SETTLE_SIGNATURE)))
    rejected | "WriteRejected" >> WriteParquetShards(
        plan.run_dir, "rejected", rejected_schema(), 1, record_type=Rejected,
        shard_key=lambda r: r.doc_id, sort_key=lambda r: (r.doc_id, r.uri, r.reason),
    )


def _settle(pipeline: beam.Pipeline, config: Config, plan: Plan, stages, read, documents,
            rejected_parts: list, counting, cleaned, read_options: dict, damaged,
            previous_state: StateSource):
    """The settled documents a change reaches, read again and brought to dedupe beside the
    changed ones (transforms/settle.py): (:class:`SettledOutputs`, every document dedupe
    decides on)."""
    near = stages.near_duplicates
    bands, max_pairs = (near.lsh()[0], near.max_bucket_pairs) if near is not None else (0, 1)

    def read_again(places, prefix: str):
        again = places | f"{prefix}Read" >> ReadPlaces(config.input.pattern, stages.read, **read_options)
        again, parts = cleaned(again, prefix)
        rejected_parts.extend(parts)
        if counting is not None:
            stripped = again | f"{prefix}Boilerplate" >> StripLate(counting)
            again = stripped.documents
            rejected_parts.append(stripped.rejected)
        return again

    remaining = read.settled
    late = []
    if counting is not None:
        flagged = read.settled | "FlagBoilerplate" >> beam.ParDo(
            FlagBoilerplate(read_frequent(plan.settle_from) if plan.settle_from else None),
            AsSingleton(counting.frequent)).with_outputs(PLACES, main="batches")
        remaining = flagged.batches
        late.append(read_again(flagged[PLACES], "Boilerplated"))
    known = [documents, *late]
    touches = (
        (
            known
            | "Known" >> beam.Flatten().with_output_types(Document)
            | "TouchBatches" >> beam.BatchElements(min_batch_size=64, max_batch_size=256)
            | "Touches" >> beam.ParDo(Touches(near, plan.access is not None)),
            list(rejected_parts) | "RejectedSoFar" >> beam.Flatten().with_output_types(Rejected)
            | "RejectedTouches" >> beam.Map(rejected_touch),
        )
        | "AllTouches" >> beam.Flatten()
    )
    # Where the settled documents' state rows lie, as a bit each per block of a state file:
    # the closure reads the state table beside them a row group at a time, so no worker holds
    # the settled documents or the table (transforms/settle.py).
    masks = (remaining
             | "SettledRows" >> beam.FlatMap(settled_rows)
             | "ByStateBlock" >> beam.GroupByKey()
             | "SettledMasks" >> beam.Map(settled_mask))
    decided = (
        pipeline
        | "Closure" >> beam.Create([None])
        | "Affected" >> beam.ParDo(
            Affected(previous_state, bands, max_pairs, config.output.document_shards,
                     config.output.chunk_shards),
            AsList(masks), AsList(touches), AsList(damaged))
        .with_outputs(REACHED, DOCUMENT_IDS, STATE_IDS, REDECIDED)
    )
    places = remaining | "ReachedPlaces" >> beam.ParDo(ReachedPlaces(), AsSingleton(decided[REACHED]))
    reached = read_again(places, "Reached")
    everything = [*known, reached] | "ToDedupe" >> beam.Flatten().with_output_types(Document)
    return SettledOutputs(places, decided[DOCUMENT_IDS], decided[STATE_IDS],
                          decided[REDECIDED]), everything

