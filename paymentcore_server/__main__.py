import sys

from paymentcore_server.cli import main

sys.exit(main())
