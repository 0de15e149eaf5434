"""Beam stages: one composite PTransform per module, thin DoFns over ``chunkline``."""

from chunkline.transforms.storage import use_emulator_credentials

# Only with STORAGE_EMULATOR_HOST set (a test or a local bucket): every process that unpickles
# one of our DoFns must then skip Beam's credential lookup. Nothing else of Beam's is changed
# on import (transforms/dofn_specs.py is applied by `chunkline run` around its own job).
use_emulator_credentials()
