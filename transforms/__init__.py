"""Beam stages: one composite PTransform per module, thin DoFns over ``chunkline``."""

from chunkline.transforms.dofn_specs import remember_dofn_specs
from chunkline.transforms.storage import use_emulator_credentials

use_emulator_credentials()
remember_dofn_specs()  # here, so every process that unpickles one of our DoFns has it too
