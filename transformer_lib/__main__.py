"""The course's command line: `python -m transformer_lib COMMAND`.

    python -m transformer_lib fetch-data            # download and verify every corpus
    python -m transformer_lib pack-data OUT_DIR     # copy them into a mirror to publish
    python -m transformer_lib train-mt --quick      # train a tiny translator (Part II)
    python -m transformer_lib translate "Hello."    # translate with it
    python -m transformer_lib train-lm              # train the GPT (Part III)
    python -m transformer_lib generate --checkpoint runs/lm/char.pt
    python -m transformer_lib check 05              # check a build-it exercise

fetch-data copies from $TRANSFORMER_DATA_MIRROR (a folder or an http(s) URL) when it
is set. `python -m transformer_lib COMMAND --help` explains each command.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys

from transformer_lib.cli_args import Parser, say

PROG = "python -m transformer_lib"


def fetch_data(args: argparse.Namespace) -> int:
    """Fetch and verify every pinned data file: where each one is, or why not."""
    from transformer_lib.data import ALL_FILES
    from transformer_lib.downloads import DataUnavailableError, fetch

    failed = 0
    for spec in ALL_FILES:
        try:
            path = fetch(spec)
        except (DataUnavailableError, OSError) as e:
            say(f"missing {spec.relpath}: {e}")
            failed += 1
        else:  # an output that cannot be written is not a missing file
            print(f"ok      {path}")
    if failed:
        say(f"fetch-data: {failed} of {len(ALL_FILES)} files could not be fetched")
    return 1 if failed else 0


def pack_data(args: argparse.Namespace) -> int:
    """Write every pinned data file, its manifest and a README into `args.out_dir`."""
    from transformer_lib.data import pack
    from transformer_lib.downloads import DataUnavailableError

    try:
        written = pack(args.out_dir)
    except (DataUnavailableError, OSError) as e:
        say(f"pack-data: {e}")
        return 1
    print(*(f"wrote   {p}" for p in written), sep="\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; each part of the course adds its own."""
    from transformer_lib import exercises, lm_cli, mt_cli

    parser = Parser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    commands.add_parser(
        "fetch-data", help="fetch and verify every pinned data file"
    ).set_defaults(run=fetch_data)
    mirror = (
        "copy every data file, verified, with its manifest into a folder (a mirror)"
    )
    pack = commands.add_parser("pack-data", help=mirror)
    pack.add_argument("out_dir", metavar="OUT_DIR", help="a new or empty folder")
    pack.set_defaults(run=pack_data)
    mt_cli.register(commands)  # Part II: train-mt, translate
    lm_cli.register(commands)  # Part III: train-lm, generate
    exercises.register(commands)  # the build-its: check
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one command; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.run(args)


def run_command(argv: list[str] | None = None) -> int:
    """`main`, with what ends a command from outside as one line, never a traceback:
    Ctrl-C (status 130), and a reader that went away (`| head`: quietly, status 141)."""
    try:
        status = main(argv)
        sys.stdout.flush()  # a full output device (/dev/full) fails here, not at exit
        return status
    except KeyboardInterrupt:
        say(f"{PROG}: interrupted (Ctrl-C)")
        return 130
    except BrokenPipeError:
        # later writes (and Python's own flush at exit) go nowhere instead of failing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except UnicodeEncodeError as e:  # e.g. a Chinese answer on an ASCII stdout
        hint = "" if e.encoding == "utf-8" else "; set PYTHONIOENCODING=utf-8"
        say(f"{PROG}: cannot write text as {e.encoding} ({e.reason}){hint}")
        return 1
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EIO):
            raise
        # a full or failing output device: say so once; later writes go nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        say(f"{PROG}: cannot write the output: {e.strerror}")
        return 1


def open_closed_streams() -> None:
    """A command started with standard output or error closed (`>&-`) says so in one
    line (if it can) and writes to the null device: without this, a print fails with a
    traceback, and a file opened later (a checkpoint) would get descriptor 1."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:  # the null device on fd (and on a closed 0)
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
            setattr(sys, name, open(fd, "w", closefd=False))
            if name == "stdout":
                say(f"{PROG}: standard output is closed; what it prints is lost")


def exit_at_once_on_ctrl_c(status: int) -> None:
    """After the command: a Ctrl-C during Python's and torch's exit hooks (a second one
    after a training stopped and saved, say) ends the process at once with the
    command's status, instead of a traceback from inside a hook."""
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(status))


if __name__ == "__main__":
    open_closed_streams()
    # A log redirected to a file keeps every line up to a kill.
    sys.stdout.reconfigure(line_buffering=True)
    status = run_command()
    exit_at_once_on_ctrl_c(status)
    sys.exit(status)
