"""``python -m dse.studies -o DIR [--only 1,3]``."""

import sys

from dse.studies import main

sys.exit(main())
