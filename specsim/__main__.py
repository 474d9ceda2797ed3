import sys

from specsim.cli import main

sys.exit(main())
