"""The documents writer's columnar conversion (chunkline.transforms.coders.statuses_table): the same
table as decoding each record and converting its row."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.records import DocumentStatus, as_row, document_schema
from chunkline.transforms.coders import DocumentStatusCoder, statuses_table

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
statuses = st.builds(
    DocumentStatus, texts, texts, texts, texts, st.sampled_from(["kept", "duplicate", "rejected"]),
    st.none() | texts, texts, texts, texts,
    st.none() | st.tuples(*[st.integers(0, 2**40)] * 2), texts,
    st.none() | st.lists(texts, max_size=3).map(tuple))


@settings(max_examples=60, deadline=None)
@given(st.lists(statuses, max_size=12), st.booleans())
def test_columns_from_the_encoded_records_are_the_rows_decoded(records, principals) -> None:
    schema = document_schema(principals=principals)
    coder = DocumentStatusCoder()
    encoded = [coder.encode(record) for record in records]
    expected = pa.Table.from_pylist([as_row(coder.decode(data), schema) for data in encoded],
                                    schema=schema)
    assert statuses_table(encoded, schema).equals(expected)


def test_a_string_that_is_not_utf8_leaves_it_to_the_records() -> None:
    coder = DocumentStatusCoder()
    lone = DocumentStatus("d", "/c/d", "a \ud800 b", "h", "kept")  # the coder passes surrogates
    assert statuses_table([coder.encode(lone)], document_schema()) is None
