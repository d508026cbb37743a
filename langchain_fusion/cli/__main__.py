"""``python -m langchain_fusion.cli``: the same as the ``langchain-fusion`` command."""

import sys

from langchain_fusion.cli import main

sys.exit(main())
