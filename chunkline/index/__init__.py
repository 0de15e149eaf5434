"""The read side of an index, importable without Beam: what an output holds and where
(``layout``), reading it from a local directory or ``gs://`` (``storage``), its runs and
manifests (``manifest``; the manifest's typed fields, read and written in one place:
``manifest_types``), a run's tables as the files and rows that are live (``tables``), and
searching a run (``search.Index``, ``query.search_result``).

Nothing is imported here, so that ``chunkline.index.layout`` costs no more than its names;
import the module you need (``from chunkline.index.search import Index``).
"""
