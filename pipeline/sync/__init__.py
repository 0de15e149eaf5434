"""Sync a run of the index into a vector store: ``chunkline sync OUTPUT --to URI``.

- ``rows``: a run's chunks as store rows, and each row's digest;
- ``plan``: what differs between the run and the store;
- ``core``: the sync (batches, state, resume) and the verification;
- ``generations``: embedding signatures, a generation per signature, the alias readers use;
- ``uri``: which store a URI names (LanceDB, PostgreSQL + pgvector, Qdrant);
- ``lance``, ``pgvector``, ``qdrant``: one store each;
- ``command``: the command line (``main``).
"""
