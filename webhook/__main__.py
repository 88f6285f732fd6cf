"""`python -m webhook` is `dra-webhook`."""

import sys

from webhook.cli import main

sys.exit(main())
