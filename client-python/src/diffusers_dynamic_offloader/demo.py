"""Connects to ddod (starting a private one when none runs) and prints what it reports.

    python -m diffusers_dynamic_offloader.demo [--address ADDRESS] [--no-embedded]
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .client import DdoClient
from .errors import DdoError
from .info_format import format_daemon_info


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the demo; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m diffusers_dynamic_offloader.demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--address", help="the daemon's address (default: DDO_DAEMON, then the default sockets)"
    )
    parser.add_argument(
        "--no-embedded",
        action="store_true",
        help="fail instead of starting a private ddod when no daemon answers",
    )
    args = parser.parse_args(argv)
    try:
        with DdoClient.connect(
            args.address, allow_embedded=False if args.no_embedded else None
        ) as client:
            print(format_daemon_info(client.info()))
            print(f"health:    {client.health()}")
            print(f"lease:     {client.lease_id}")
            if client.embedded:
                print(f"this demo started a private ddod (pid {client.embedded_pid}); stopping it")
    except DdoError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
