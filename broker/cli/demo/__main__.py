"""``python -m broker.cli.demo``."""

import sys

from broker.cli.demo import main

sys.exit(main())
