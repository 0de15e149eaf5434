"""Beam stages: one composite PTransform per module, thin DoFns over ``chunkline``."""

from chunkline.transforms.storage import use_emulator_credentials

use_emulator_credentials()
