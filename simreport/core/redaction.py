"""Credentials kept out of everything simreport writes or shows: the userinfo of a URL
(`http://user:secret@host`) and the values of query parameters that look like keys (`?api_key=…`)
become `***`; the rest of the URL is left exactly as it was.

Only what leaves the process is redacted: a run still calls the URL it was given. The functions
here never raise, whatever they are handed, because they sit on the paths that report failures.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus

MARK = "***"
"""What a redacted userinfo or parameter value reads as."""

TEXT_MARK = "[redacted]"
"""What a credential found in free text (an error message, a server's reply) reads as."""

# Parameter names are compared lower-cased with `-`, `_` and `.` removed: `api_key`, `API-Key`
# and `apikey` are one name. Exact names are the short ones that would match too much as parts.
_SECRET_NAMES = frozenset({"key", "sig", "code", "pass", "pw"})
_SECRET_PARTS = (
    "key",
    "token",
    "secret",
    "passw",
    "pwd",
    "auth",
    "credential",
    "signature",
    "session",
)

# scheme://userinfo@ — the authority ends at the first `/`, `?` or `#` (as httpx and urllib
# read it), and the userinfo runs to the last `@` before that end.
_USERINFO = re.compile(r"^(\s*(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//)([^/?#]*)@")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"<>`]+")
_WHOLE_URL = re.compile(r"\s*(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//\S*\s*")

# A credential shorter than this is not searched for in free text (URLs in the text are still
# redacted): blanking every "ab" would make a message unreadable and protect nothing.
_MIN_SECRET_LENGTH = 4


def is_secret_name(name: str) -> bool:
    """Whether a query parameter called `name` carries a credential (case-insensitive)."""
    plain = re.sub(r"[-_.\s]", "", unquote_plus(name)).lower()
    return plain in _SECRET_NAMES or any(part in plain for part in _SECRET_PARTS)


def _redact_params(text: str) -> str:
    """`a=1&api_key=xyz` → `a=1&api_key=***`; separators and other parameters untouched."""
    pieces = re.split(r"([&;])", text)
    for i in range(0, len(pieces), 2):
        name, eq, value = pieces[i].partition("=")
        if eq and value and is_secret_name(name):
            pieces[i] = f"{name}={MARK}"
    return "".join(pieces)


def redact_url(url: str) -> str:
    """`url` with its userinfo and key-like query (and fragment) values replaced by `***`.
    Anything that is not a URL comes back unchanged; this never raises."""
    try:
        if not isinstance(url, str):
            return str(url)
        text = _USERINFO.sub(lambda m: f"{m.group(1)}{MARK}@", url, count=1)
        head, hash_mark, fragment = text.partition("#")
        base, question, query = head.partition("?")
        if question:
            head = base + question + _redact_params(query)
        if hash_mark and "=" in fragment:
            fragment = _redact_params(fragment)
        return head + hash_mark + fragment
    except Exception:  # a redactor that fails must not leak what it was given
        return MARK


def redact_text(text: str) -> str:
    """Free text (an error message, a log line) with every URL in it redacted."""
    try:
        return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    except Exception:
        return MARK


def is_redacted(url: str | None) -> bool:
    """Whether `url` carries credentials that were redacted (`***` where they were), so using it
    as an endpoint would send the marker instead of them."""
    if not isinstance(url, str):
        return False
    match = _USERINFO.match(url)
    if match is not None and MARK in match.group(2):
        return True
    rest = url.split("?", 1)[1] if "?" in url else ""
    for piece in re.split(r"[&;#]", rest):
        name, eq, value = piece.partition("=")
        if eq and value == MARK and is_secret_name(name):
            return True
    return False


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The credentials `url` carries, as they may appear in text: the userinfo, the password
    (raw and decoded), the Basic authorisation token httpx sends for them, and the values of
    key-like query parameters (raw and decoded). A user name is included only when it stands
    alone (a token passed as the user)."""
    if not isinstance(url, str):
        return ()
    found: list[str] = []
    try:
        match = _USERINFO.match(url)
        if match is not None:
            userinfo = match.group(2)
            user, colon, password = userinfo.partition(":")
            found.append(userinfo)
            if colon:
                found += [password, unquote(password)]
            else:
                found += [user, unquote(user)]
            token = f"{unquote(user)}:{unquote(password)}".encode()
            found.append(base64.b64encode(token).decode("ascii"))
        rest = url.split("?", 1)[1] if "?" in url else ""
        for piece in re.split(r"[&;#]", rest):
            name, eq, value = piece.partition("=")
            if eq and value and is_secret_name(name):
                found += [value, unquote_plus(value)]
    except Exception:
        pass
    unique = {s for s in found if len(s) >= _MIN_SECRET_LENGTH and s != MARK}
    return tuple(sorted(unique, key=lambda s: (-len(s), s)))


def redact_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with each of `secrets` (longest first) blanked out, then every URL in it redacted."""
    try:
        for secret in sorted((s for s in secrets if s), key=len, reverse=True):
            text = text.replace(secret, TEXT_MARK)
    except Exception:
        return MARK
    return redact_text(text)


def redact_document(doc: Any) -> Any:
    """A copy of a JSON-like document (a scenario, a plan, a manifest) with every URL in its
    strings and keys redacted: `baseUrl` wherever it is, an axis level that sets one, a condition
    id that names one. Other values are returned as they are."""
    if isinstance(doc, str):
        return redact_url(doc) if _WHOLE_URL.fullmatch(doc) else redact_text(doc)
    if isinstance(doc, Mapping):
        return {
            (redact_text(k) if isinstance(k, str) else k): redact_document(v)
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [redact_document(v) for v in doc]
    if isinstance(doc, tuple):
        return tuple(redact_document(v) for v in doc)
    return doc


__all__ = [
    "MARK",
    "TEXT_MARK",
    "is_redacted",
    "is_secret_name",
    "redact_document",
    "redact_secrets",
    "redact_text",
    "redact_url",
    "url_secrets",
]
