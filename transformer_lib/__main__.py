"""Command line: `python -m transformer_lib COMMAND`.

    python -m transformer_lib fetch-data   # download (or copy from $TRANSFORMER_DATA_MIRROR) and verify every corpus
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m transformer_lib", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch-data", help="fetch and verify every pinned data file")
    args = parser.parse_args(argv)

    if args.command == "fetch-data":
        from transformer_lib.data import DataUnavailableError, fetch_all

        try:
            for path in fetch_all():
                print(f"ok  {path}")
        except DataUnavailableError as e:
            print(e, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
