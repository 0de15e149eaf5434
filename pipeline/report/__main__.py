"""``python -m pipeline.report OUTPUT [--run RUN_ID]``: the run report, without the CLI wiring."""

import sys

from pipeline.report import main

sys.exit(main())
