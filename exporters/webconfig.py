"""TLS and basic authentication for the metrics endpoint, configured like every Prometheus exporter.

The file uses the exporter-toolkit web-configuration format, so a site that already has one for
node_exporter reuses it unchanged::

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional; needs client_ca_file
      client_ca_file: clients.pem
      min_version: TLS12             # default TLS12
    http_server_config:
      headers: {X-Frame-Options: deny}
    basic_auth_users:
      prometheus: $2b$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

Differences from the toolkit, on purpose: the file is read at start and on SIGHUP, not on every
request; settings this implementation does not honour (cipher_suites, curve_preferences, http2,
rate_limit, client_allowed_sans) are refused with a message rather than silently ignored, because
a security setting that looks applied but is not is worse than none.

A bcrypt check costs tens of milliseconds by design, so every (user, password) pair checked is
remembered by the SHA-256 of the password with its answer, for the life of the configuration: a
client repeating a wrong password costs a dictionary lookup, not a bcrypt. The failures remembered
are bounded (the oldest forgotten first), so a flood of distinct wrong passwords cannot grow the
daemon. bcrypt checks run one at a time in an executor of their own, with a bounded queue and a
back-off per client (:mod:`.authgate`), so that flood costs one core at most and never delays a
client whose password is remembered. An unknown user still pays one bcrypt check, so response time
does not reveal which user names exist.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import hmac
import importlib.util
import os
import re
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any

from ccdiag.core.errors import UserInputError

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users"}
#: a valid bcrypt hash of a random password, checked for unknown users (constant-time answer)
_DUMMY_HASH = b"$2b$10$A4Q1bH9R5VTiMjlINiOfUueDEnst0a59t3KaeEX9kUzEeTrSbSzWC"


class WebConfigError(UserInputError, ValueError):
    """A web configuration that cannot be used; the message names the file and the setting."""


#: wrong (user, password) pairs remembered per configuration
MAX_FAILED_REMEMBERED = 4096


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes, remembering every answer.

    :meth:`parse`, :meth:`known` and :meth:`verify` are the steps the server's
    :class:`~ccdiag.exporters.authgate.PasswordGate` takes (the cache on the event loop, bcrypt in its
    own executor); :meth:`check` takes them in order, for callers without a loop.
    """

    def __init__(self, users: dict[str, str]):
        self.users = {u: h.encode() for u, h in users.items()}
        self._ok: set[tuple[str, bytes]] = set()
        self._failed: collections.OrderedDict[tuple[str, bytes], None] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()  # one bcrypt at a time
        self.bcrypt_checks = 0  # how many were run (benchmarks read it)

    @staticmethod
    def parse(header: str | None) -> tuple[str, str, bytes] | None:
        """(user, password, SHA-256 of the password) of a ``Basic`` header, or ``None``."""
        if not header or not header.startswith("Basic "):
            return None
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if not sep:
            return None
        return user, password, hashlib.sha256(password.encode()).digest()

    def check(self, header: str | None) -> bool:
        parsed = self.parse(header)
        if parsed is None:
            return False
        user, password, digest = parsed
        known = self.known(user, digest)
        return known if known is not None else self.verify(user, password, digest)

    def known(self, user: str, digest: bytes) -> bool | None:
        """The remembered answer for this pair, or ``None``."""
        with self._lock:
            if any(u == user and hmac.compare_digest(d, digest) for u, d in self._ok):
                return True
            if (user, digest) in self._failed:
                return False
        return None

    def verify(self, user: str, password: str, digest: bytes) -> bool:
        """The bcrypt check (one at a time), its answer remembered."""
        with self._bcrypt_lock:
            known = self.known(user, digest)  # checked by another caller while this one waited
            if known is not None:
                return known
            ok = self._bcrypt(user, password)
        with self._lock:
            if ok:
                self._ok.add((user, digest))
            else:
                self._failed[(user, digest)] = None
                while len(self._failed) > MAX_FAILED_REMEMBERED:
                    self._failed.popitem(last=False)
        return ok

    def _bcrypt(self, user: str, password: str) -> bool:
        import bcrypt

        hashed = self.users.get(user)
        self.bcrypt_checks += 1
        try:
            return bcrypt.checkpw(password.encode(), hashed or _DUMMY_HASH) and hashed is not None
        except ValueError:  # a malformed hash in the file
            return False


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    auth: BasicAuth | None = None
    headers: dict[str, str] = field(default_factory=dict)
    source: str | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"


#: the largest certificate, key or CA bundle read (a CA bundle of a whole OS is about 250 KB)
MAX_PEM_BYTES = 4 << 20


def _path(base: str, value: Any, what: str, source: str) -> str:
    """The file's path, once it is known to be a regular file of at most :data:`MAX_PEM_BYTES`:
    OpenSSL would wait forever on a FIFO and read a device without end."""
    from ccdiag.core.userfiles import UserFileError, read_user_bytes

    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{source}: {what} must be a file path")
    path = value if os.path.isabs(value) else os.path.join(base, value)
    try:
        read_user_bytes(path, what, MAX_PEM_BYTES)
    except UserFileError as exc:
        raise WebConfigError(f"{source}: cannot load {what}: {exc}") from None
    return path


def _tls_context(tls: dict, base: str, source: str) -> ssl.SSLContext | None:
    unknown = set(tls) - _TLS_KEYS
    if unknown:
        raise WebConfigError(f"{source}: tls_server_config.{sorted(map(str, unknown))[0]} is not supported here "
                             f"(supported: {', '.join(sorted(_TLS_KEYS))})")
    if not tls.get("cert_file") and not tls.get("key_file"):
        return None
    if not (tls.get("cert_file") and tls.get("key_file")):
        raise WebConfigError(f"{source}: tls_server_config needs both cert_file and key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        minimum = str(tls.get("min_version", "TLS12"))
        if minimum in ("TLS10", "TLS11"):
            raise WebConfigError(f"{source}: min_version {minimum} is refused here: TLS 1.0 and 1.1 are deprecated "
                                 f"(RFC 8996); use TLS12 or TLS13")
        ctx.minimum_version = TLS_VERSIONS[minimum]
        if "max_version" in tls:
            ctx.maximum_version = TLS_VERSIONS[str(tls["max_version"])]
    except KeyError as exc:
        raise WebConfigError(f"{source}: unknown TLS version {exc.args[0]} "
                             f"(use one of {', '.join(TLS_VERSIONS)})") from None
    try:
        ctx.load_cert_chain(_path(base, tls["cert_file"], "cert_file", source),
                            _path(base, tls["key_file"], "key_file", source))
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(f"{source}: cannot load the TLS certificate/key: {exc}") from None
    auth_type = str(tls.get("client_auth_type", "NoClientCert"))
    if auth_type not in CLIENT_AUTH:
        raise WebConfigError(f"{source}: client_auth_type {auth_type} is not supported "
                             f"(use one of {', '.join(CLIENT_AUTH)})")
    ctx.verify_mode = CLIENT_AUTH[auth_type]
    if ctx.verify_mode != ssl.CERT_NONE:
        if not tls.get("client_ca_file"):
            raise WebConfigError(f"{source}: client_auth_type {auth_type} needs client_ca_file")
        try:
            ctx.load_verify_locations(_path(base, tls["client_ca_file"], "client_ca_file", source))
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"{source}: cannot load client_ca_file: {exc}") from None
    return ctx


#: a header name is an RFC 9110 token
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _headers(value: Any, source: str) -> dict[str, str]:
    """``http_server_config.headers`` as names and values that can go on a response as they are.

    A value with CR, LF or another control character would let the file add headers of its own
    (or end the header early) on every response; it is refused rather than cleaned."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{source}: http_server_config.headers must map header names to values")
    out = {}
    for name, val in value.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise WebConfigError(f"{source}: http_server_config.headers: {str(name)[:60]!r} is not a header name")
        if isinstance(val, (dict, list)) or val is None:
            raise WebConfigError(f"{source}: http_server_config.headers.{name} must be a text value")
        text = str(val)
        if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in text):
            raise WebConfigError(f"{source}: http_server_config.headers.{name} holds a line break or another "
                                 f"control character; a header value must be one line")
        out[name] = text
    return out


def parse_web_config(doc: Any, base_dir: str = ".", source: str = "<web-config>") -> WebConfig:
    """A :class:`WebConfig` from the parsed YAML document ``doc``."""
    if doc is None:
        return WebConfig(source=source)
    if not isinstance(doc, dict):
        raise WebConfigError(f"{source}: expected a mapping at the top level")
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise WebConfigError(f"{source}: {sorted(map(str, unknown))[0]} is not supported here "
                             f"(supported: {', '.join(sorted(_TOP_KEYS))})")
    tls = doc.get("tls_server_config") or {}
    if not isinstance(tls, dict):
        raise WebConfigError(f"{source}: tls_server_config must be a mapping")
    ctx = _tls_context(tls, base_dir, source)
    http = doc.get("http_server_config") or {}
    if not isinstance(http, dict) or set(http) - {"headers"}:
        raise WebConfigError(f"{source}: http_server_config supports only 'headers' here")
    headers = _headers(http.get("headers"), source)
    users = doc.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise WebConfigError(f"{source}: basic_auth_users must map user names to bcrypt hashes")
    auth = None
    if users:
        if importlib.util.find_spec("bcrypt") is None:
            raise WebConfigError(f"{source}: basic_auth_users needs the 'bcrypt' Python package "
                                 f"(pip install '.[daemon]' in ccdiag's source tree, or pip install bcrypt)")
        for user, hashed in users.items():
            if not isinstance(user, (str, int)) or ":" in str(user) or not str(user):
                raise WebConfigError(f"{source}: basic_auth_users: {str(user)[:60]!r} is not a user name "
                                     f"(no colon, not empty)")
            if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
                raise WebConfigError(f"{source}: basic_auth_users.{user} must be a bcrypt hash ($2b$...)")
        auth = BasicAuth({str(u): h for u, h in users.items()})
    return WebConfig(ssl_context=ctx, auth=auth, headers=headers, source=source)


def load_web_config(path: str) -> WebConfig:
    """Read a web-config YAML file (raises :class:`WebConfigError`)."""
    try:
        import yaml
    except ImportError:
        raise WebConfigError(f"{path}: reading a web config needs PyYAML: pip install '.[daemon]' in ccdiag's "
                             f"source tree (or pip install PyYAML bcrypt)") from None
    try:
        from ccdiag.core.userfiles import read_user_text

        doc = yaml.safe_load(read_user_text(path, "web config", 1 << 20))
        return parse_web_config(doc, os.path.dirname(os.path.abspath(path)), path)
    except OSError as exc:
        raise WebConfigError(str(exc) if not getattr(exc, "strerror", None) else
                             f"{path}: cannot read ({exc.strerror})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"{path}: not valid YAML: {exc}") from None
    except WebConfigError:
        raise
    except (RecursionError, ValueError, OverflowError, TypeError) as exc:
        # nesting deeper than the parser's stack, a date like 2001-13-45, a number without a float
        raise WebConfigError(f"{path}: not a usable YAML document ({type(exc).__name__}: {str(exc)[:100]})") from None
