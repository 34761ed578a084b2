"""
What a user sees when a command stops on a bad input: the one message that says what is wrong
(as the last line of a traceback would), not the traceback; `--verbose` shows the traceback.
"""
import argparse
import functools
import logging
import sys
from typing import Callable

from allennlp.common.checks import ConfigurationError

logger = logging.getLogger(__name__)

# Bad inputs and the machine's state (a full disk, a missing file): the message is the answer.
USER_ERRORS = (ConfigurationError, OSError)


def add_verbose_argument(subparser: argparse.ArgumentParser) -> None:
    subparser.add_argument("--verbose", action="store_true",
                           help="on an error, print the whole traceback, not only its message")


def one_line_errors(command: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], None]:
    """`command`, ending with exit status 1 and the error's one line on a `USER_ERRORS` error."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> None:
        try:
            command(args)
        except USER_ERRORS as error:
            if getattr(args, "verbose", False):
                raise
            logger.debug("The error's traceback:", exc_info=True)
            sys.exit(f"{type(error).__name__}: {error}")

    return run
