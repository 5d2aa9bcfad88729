import sys

from fdprof.cli import main

sys.exit(main())
