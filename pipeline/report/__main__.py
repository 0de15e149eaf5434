"""``python -m chunkline.pipeline.report OUTPUT [--run RUN_ID]``: the run report, without the CLI wiring."""

import sys

from chunkline.pipeline.report import main

sys.exit(main())
