"""`python -m node_agent`: the node agent (same options as `caldera agent`)."""

import sys

from node_agent.main import main

sys.exit(main())
