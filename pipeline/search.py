"""A run opened once and searched many times: :mod:`chunkline.index.search`, which needs no
Beam. Re-exported here for every existing import."""

from chunkline.index.search import AccessRequired, Index, check_principals, check_question

__all__ = ["AccessRequired", "Index", "check_principals", "check_question"]
