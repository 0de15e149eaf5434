"""Config -> the library's options, once: every section the library reads becomes its options
object here (each section generated from that object's dataclass, ``pipeline/config.py``), and
the graph, the plan and the run report take them from the result, never from the config again."""

from __future__ import annotations

from dataclasses import dataclass

from chunkline.access import AccessOptions
from chunkline.boilerplate import BoilerplateOptions
from chunkline.clean import CleanOptions
from chunkline.credentials import CredentialOptions
from chunkline.context.options import ContextOptions
from chunkline.embedder import EmbedOptions
from chunkline.late import LateOptions
from chunkline.minhash import MinHashOptions
from chunkline.readers import ReadOptions
from chunkline.sparse import SparseOptions
from chunkline.splitting.semantic import SemanticOptions
from chunkline.pipeline.config import Config


@dataclass(frozen=True)
class StageOptions:
    """The library options of one run; None: that stage is off."""

    read: ReadOptions
    clean: CleanOptions | None
    credentials: CredentialOptions
    boilerplate: BoilerplateOptions | None
    near_duplicates: MinHashOptions | None
    semantic: SemanticOptions | None  # split.mode: semantic
    embed: EmbedOptions | None
    late: LateOptions | None  # embed.mode: late
    context: ContextOptions | None
    sparse: SparseOptions | None
    access: AccessOptions | None = None  # access control off


def stage_options(config: Config) -> StageOptions:
    def optional(section):
        return section.options() if section is not None else None

    embed = config.embed
    return StageOptions(
        read=config.input.options(),
        clean=optional(config.clean),
        credentials=config.secrets.options(),
        boilerplate=optional(config.boilerplate),
        near_duplicates=optional(config.dedupe.near),
        semantic=config.split.semantic.options() if config.split.mode == "semantic" else None,
        embed=optional(config.embed),
        late=embed.late.options() if embed is not None and embed.mode == "late" else None,
        context=optional(config.context),
        sparse=optional(config.sparse),
        access=optional(config.access),
    )
