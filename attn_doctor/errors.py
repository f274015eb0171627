"""Errors the user can act on: each names the input at fault and fits on one line."""


class InputError(Exception):
    """Bad input (a rule, requirements, env or config file, a version, a flag value)."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message
