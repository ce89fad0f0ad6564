"""python -m transformerop.report: the report CLI (see transformerop/report/__init__.py)."""
import sys

from . import main

sys.exit(main())
