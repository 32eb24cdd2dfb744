import sys

from segpipe.cli import main

sys.exit(main())
