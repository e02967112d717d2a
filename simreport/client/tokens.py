"""The bearer token a client sends (`load_token`): the first line of a token file. Its errors
name the file and the setting that named it (`TOKEN_SETTING` by default), never the token."""

from __future__ import annotations

from ..core.errors import InputError

TOKEN_SETTING = "--token-file or SIMREPORT_TOKEN_FILE"
"""Where the command line reads the bearer token from; named when the service refuses it."""


def load_token(path: str, *, setting: str = TOKEN_SETTING) -> str:
    """The bearer token in a file: its first line, stripped.

    Args:
        path: the token file.
        setting: the option or variable that named the file, for the error.

    Returns:
        The token.

    Raises:
        InputError: the file cannot be read, is not UTF-8 text, or its first line is empty or
            holds white space; it names the file and the setting, never the content.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise InputError(
            f"cannot read the token file ({exc.strerror or type(exc).__name__})",
            file=path,
            path=setting,
        ) from None
    except UnicodeDecodeError:
        raise InputError("the token file is not UTF-8 text", file=path, path=setting) from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token or any(c.isspace() for c in token):
        raise InputError(
            "the token file is empty or its first line holds white space",
            file=path,
            path=setting,
        )
    return token
