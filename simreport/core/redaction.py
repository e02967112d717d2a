"""Credentials kept out of everything simreport writes or shows: the userinfo of a URL
(`http://user:secret@host`) and the values of query parameters that look like keys (`?api_key=…`)
become `***`; the rest of the URL is left exactly as it was.

Only what leaves the process is redacted: a run still calls the URL it was given. The functions
here never raise, whatever they are handed, because they sit on the paths that report failures.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
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
    except Exception:  # fail safe: a redactor that fails must not leak what it was given
        return MARK


def redact_text(text: str) -> str:
    """Free text (an error message, a log line) with every URL in it redacted."""
    try:
        return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    except Exception:  # fail safe: a redactor that fails must not leak what it was given
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
    except Exception:  # fail safe: the credentials found so far are still blanked out
        pass
    unique = {s for s in found if len(s) >= _MIN_SECRET_LENGTH and s != MARK}
    return tuple(sorted(unique, key=lambda s: (-len(s), s)))


def secret_forms(secret: str) -> set[str]:
    """The ways `secret` can appear in text: as it is, and as an error message or a document
    quotes it — escaped as Python quotes a string or bytes (a header value an HTTP library
    refuses: `b'Bearer abc\\n…'`), as JSON quotes it, and, for a value of several lines, each
    of its lines long enough not to be a word."""
    forms = {secret}
    try:
        forms.add(repr(secret)[1:-1])
        forms.add(json.dumps(secret)[1:-1])
        forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        raw = secret.encode("utf-8", "backslashreplace")
        forms.add(repr(raw)[2:-1])
        if "\n" in secret or "\r" in secret:
            forms.update(
                line.strip() for line in secret.splitlines() if len(line.strip()) >= _MIN_LINE
            )
    except Exception:  # fail safe: the secret as it is, and the forms found so far, stay
        pass
    return {f for f in forms if len(f) >= _MIN_SECRET_LENGTH}


_MIN_LINE = 8
"""The shortest line of a secret of several lines that is blanked out on its own."""


def redact_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with each of `secrets` blanked out in every form it may be quoted in
    (`secret_forms`, longest first), then every URL in it redacted."""
    try:
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms |= secret_forms(secret)
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, TEXT_MARK)
    except Exception:  # fail safe: a redactor that fails must not leak what it was given
        return MARK
    return redact_text(text)


MIN_ENVIRONMENT_SECRET = 8
"""The shortest value of an environment variable that `environment_secrets` takes: shorter ones
(`1`, `true`, a port) would blank out ordinary words and numbers wherever they appear."""


_CREDENTIAL_WORDS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "PWD",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "SIGNATURE",
        "SESSION",
    }
)
_NOT_CREDENTIALS = frozenset({"PWD", "OLDPWD"})
"""The shell's working folders: named like a password, holding a path."""


def is_credential_variable(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential: one of its words
    (split at `_`, `-` and `.`) is KEY, TOKEN, SECRET, PASSWORD, CREDENTIALS, AUTH, … or ends
    like one (`GITHUBTOKEN`, `OPENAI_APIKEY`); `PWD` and `OLDPWD` are the shell's folders."""
    upper = name.upper()
    if upper in _NOT_CREDENTIALS:
        return False
    words = [w for w in re.split(r"[_.\-]", upper) if w]
    return any(
        w in _CREDENTIAL_WORDS or w.endswith(("KEY", "TOKEN", "SECRET", "PASSWORD")) for w in words
    )


def environment_secrets(environ: Mapping[str, str], names: Iterable[str] = ()) -> list[str]:
    """The values of the variables of `environ` that hold credentials: those `names` names (a
    model endpoint's key variable, the variable holding API tokens) and those whose name says
    so (`DB_PASSWORD`, `OPENAI_API_KEY`, `GITHUB_TOKEN`, …; `is_credential_variable`). A value
    that is the path of a file or folder points at a secret (a key file, an agent's socket)
    rather than holding one, and is left out with the values too short to look for."""
    wanted = set(names)
    found = {
        value.strip()
        for name, value in environ.items()
        if name in wanted or is_credential_variable(name)
    }
    return sorted(v for v in found if len(v) >= MIN_ENVIRONMENT_SECRET and not _names_a_path(v))


def _names_a_path(value: str) -> bool:
    if not value.startswith(("/", "~")) or any(c.isspace() for c in value):
        return False
    try:
        return Path(value).expanduser().exists()
    except (OSError, ValueError):
        return False


class Scrubber:
    """Blanks out a fixed set of secrets, in every form they may be quoted in (`secret_forms`),
    from text, JSON-like documents and files: the guard a run's data passes before others read
    it. One pattern finds them all, so text that holds none (nearly all) costs one search."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms |= secret_forms(secret)
        # Longest first: where two forms start at the same place, the longer is blanked whole.
        ordered = sorted(forms, key=lambda f: (-len(f), f))
        self.forms = tuple(ordered)
        alternatives = "|".join(re.escape(f) for f in ordered)
        self._pattern = re.compile(alternatives) if ordered else None
        self._bytes = re.compile(alternatives.encode("utf-8")) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def found(self, text: str) -> bool:
        """Whether `text` holds a secret (JSON text included: its escaped forms are forms)."""
        return self._pattern is not None and self._pattern.search(text) is not None

    def text(self, text: str) -> str:
        """`text` with every secret blanked out."""
        return self._pattern.sub(TEXT_MARK, text) if self._pattern is not None else text

    def document(self, doc: Any) -> Any:
        """`doc` (plain JSON) with every secret blanked out of its strings and keys; `doc`
        itself when it holds none."""
        if self._pattern is None or not self.found(json.dumps(doc, ensure_ascii=False)):
            return doc
        return self._walk(doc)

    def _walk(self, doc: Any) -> Any:
        if isinstance(doc, str):
            return self.text(doc)
        if isinstance(doc, Mapping):
            return {
                (self.text(k) if isinstance(k, str) else k): self._walk(v) for k, v in doc.items()
            }
        if isinstance(doc, (list, tuple)):
            return [self._walk(v) for v in doc]
        return doc

    def files_holding(self, root: Path) -> list[Path]:
        """The files under `root` that hold a secret."""
        if self._bytes is None:
            return []
        return [
            path
            for path in sorted(root.rglob("*"))
            if path.is_file() and self._bytes.search(path.read_bytes()) is not None
        ]


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
    "Scrubber",
    "environment_secrets",
    "is_redacted",
    "is_secret_name",
    "redact_document",
    "redact_secrets",
    "redact_text",
    "redact_url",
    "secret_forms",
    "url_secrets",
]
