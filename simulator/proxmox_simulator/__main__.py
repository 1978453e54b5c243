"""``python -m proxmox_simulator`` is the ``proxmox-simulator`` command."""

import sys

from proxmox_simulator.cli import main

sys.exit(main())
