"""The one exception type the CLI turns into a clean message and an exit status."""


class UserError(Exception):
    """Something the user can fix: bad input, a missing tool, a failed check.

    The message says what was wrong, where, and what to do; the CLI prints it without a
    traceback and exits with ``exit_code``.
    """

    exit_code = 2
