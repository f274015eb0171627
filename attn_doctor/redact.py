"""Scrub text that is meant for a public tracker: secrets and home directories.

Two layers, because one mistake is enough to leak a token: variables whose names say "secret"
are never read into a report (``secret_name``), and the finished text is scrubbed again
(``scrub``) for values shaped like tokens, credentials in URLs, and home directories, which
name the user and show up in every installed package's path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

SECRET_NAME_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
REDACTED = "[redacted]"  # not <redacted>: GitHub would drop it as an HTML tag

_TOKEN_SHAPES = (
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{30,}",
    r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"sk-[A-Za-z0-9_-]{20,}",  # OpenAI, Anthropic and other API keys
    r"xox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"AKIA[0-9A-Z]{16}",  # AWS access key id
)
_TOKENS = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(_TOKEN_SHAPES) + ")")
_START_OF_PATH, _END_OF_NAME = r"(?<![\w.~-])", r"(?![\w.-])"
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@")
# a home folder not given by HOME: /home/<user>, /Users/<user>, C:\Users\<user> (also as C:\\Users)
_HOME_PATTERN = re.compile(
    _START_OF_PATH + r"(?:/home|/Users|[A-Za-z]:[\\/]+Users)[\\/]+[^\\/\s`'\"|<>:;,()]+"
)


def secret_name(name: str) -> bool:
    """A variable whose name says it holds a secret: its value, and even its name, stay out."""
    upper = name.upper()
    return any(word in upper for word in SECRET_NAME_WORDS)


def home_dirs(environ: Mapping[str, str]) -> list[str]:
    """This user's home folders (HOME, USERPROFILE, and where they really are), longest first."""
    found: set[str] = set()
    for variable in ("HOME", "USERPROFILE"):
        home = environ.get(variable, "").rstrip("/\\")
        if len(home) > 1:
            found |= {home, os.path.realpath(home)}
    return sorted((home for home in found if len(home) > 1), key=len, reverse=True)


def scrub(text: str, homes: Iterable[str] = ()) -> str:
    """``text`` without token-shaped values, URL credentials and home directories (each becomes ``~``)."""
    text = _TOKENS.sub(REDACTED, text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    for home in homes:
        text = re.sub(_START_OF_PATH + re.escape(home) + _END_OF_NAME, "~", text)
    return _HOME_PATTERN.sub("~", text)
