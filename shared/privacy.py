"""The privacy filter: obvious secrets redacted before any text leaves PostgreSQL for the index.

Nothing reaches the embedding model or the index unfiltered (issue 8, DESIGN §4 and §8).

What the projection sends out, and so what this module filters:

- the projected text (title, content fields, scope, concepts, dependency names), embedded by
  fastembed and turned into the point's dense and BM25 vectors;
- the string values of the point payload (``scope``, ``concepts``, dependency names);
- at recall, the query text (embedded) and the filter values sent to the index, filtered the
  same way so that a redacted payload value still matches its filter.

PostgreSQL keeps the original; recall results are rebuilt from PostgreSQL, so a caller allowed to
see the workspace sees the original text. Each secret becomes ``[REDACTED:<kind>]``.

**Fail closed.** :meth:`PrivacyFilter.redact` either returns redacted text or raises
:class:`PrivacyFilterFailed`; any other error inside it is turned into that error. The projection
then records the failure on the operation (pending, attempts counted, ``failed`` after
``MEMARC_MAX_ATTEMPTS``) and sends nothing. Texts longer than ``max_chars``
(``MEMARC_PRIVACY_MAX_CHARS``, default 500,000; the API's field limits keep a card's projected
text under about 200,000) are refused rather than passed through unfiltered, and a text that
still matches a rule after redaction (a rule interaction the filter did not anticipate) is
refused too.

Why our own patterns: we tried ``detect-secrets`` 1.5.0 (Yelp) and ``bc-detect-secrets`` 1.5.52,
the maintained Python secret scanners on PyPI. Their ad-hoc ``scan_line`` API is built to flag
lines of source files, not to locate secrets for redaction in prose: on our samples it missed
``password=...`` in text, ``user=...&password=...`` in a JDBC URL, Google ``AIza`` keys and
``Authorization: Bearer`` tokens, returned only ``ghp`` as the "secret" of a GitHub token and only
the header line of a PEM key, and reported every short word as a high-entropy string. Replacing
the reported values would have left the secrets in place. The patterns below are small, anchored
on the secret's own prefix or on a key name, and each names its source:

- vendor token formats: the rules of the same names in gitleaks ``config/gitleaks.toml`` (MIT):
  ``aws-access-token``, ``github-pat`` / ``github-oauth`` / ``github-app-token`` /
  ``github-fine-grained-pat``, ``gitlab-pat``, ``slack-*-token`` and ``slack-webhook-url``,
  ``stripe-access-token``, ``gcp-api-key``, ``openai-api-key``, ``npm-access-token``,
  ``pypi-upload-token``, ``jwt``, ``private-key``; and detect-secrets' plugins ``aws.py``,
  ``github_token.py``, ``slack.py``, ``stripe.py``, ``jwt.py``, ``private_key.py`` (Apache-2.0);
- credentials in URLs (``scheme://user:password@host``): detect-secrets ``basic_auth.py``;
- ``key=value`` / ``key: value`` pairs with a secret-like key name: the key list of
  detect-secrets ``keyword.py`` (password, passwd, pwd, secret, api_key, ...), extended with
  token and credential names; SQL ``PASSWORD '...'`` / ``IDENTIFIED BY`` from PostgreSQL's
  ``CREATE ROLE`` and MySQL/Oracle's ``CREATE USER`` syntax;
- ``Authorization:`` header values and ``Bearer`` tokens: RFC 6750 §2.1 (``b64token`` characters).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from shared.errors import PrivacyFilterFailed

MARKER = "[REDACTED:{kind}]"
#: Default longest text the filter accepts (characters).
DEFAULT_MAX_CHARS = 500_000
#: Redaction passes before a text that still matches a rule is refused.
MAX_PASSES = 3


@dataclass(frozen=True)
class Rule:
    """One kind of secret: a pattern and how a match is replaced.

    ``group`` names the part of the match that is the secret (replaced by the marker, the rest of
    the match is kept, e.g. the key name); ``None`` replaces the whole match.
    """

    kind: str
    pattern: re.Pattern[str]
    group: str | None = None
    kind_of: Callable[[re.Match[str]], str] | None = None

    def replace(self, match: re.Match[str]) -> str:
        kind = self.kind_of(match) if self.kind_of else self.kind
        marker = MARKER.format(kind=kind)
        if self.group is None:
            return marker
        start, end = match.span(self.group)
        base = match.start()
        text = match.group(0)
        return text[:start - base] + marker + text[end - base:]


_NOT_MARKER = r"(?!\[REDACTED:)"
#: Secret-like key names, matched anywhere inside a key token (``db_password``, ``PGPASSWORD``,
#: ``spring.datasource.password``, ``x-api-key``); a bare ``pass`` only as a whole segment
#: (``db_pass``, not ``pass_id`` or ``passing``).
_SECRET_KEY = (r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
               r"|auth[_-]?key|private[_-]?key|credentials?|session[_-]?key|contrase(?:ñ|n)a"
               r"|(?<![A-Za-z0-9])pass(?![A-Za-z0-9_.-]))")
_TOKEN_CHARS = r"[A-Za-z0-9_.-]"


def _key_token(name_pattern: str) -> str:
    """A whole key token (no backtracking into it) that contains ``name_pattern``: linear time
    even on a long run of key-like characters."""
    return (rf"(?<!{_TOKEN_CHARS})(?=[A-Za-z0-9_.-]*?{name_pattern})(?P<key>{_TOKEN_CHARS}++)")


def _key_kind(match: re.Match[str]) -> str:
    key = match.group("key").lower()
    if "pass" in key or "pwd" in key or "contrase" in key:
        return "password"
    if "token" in key:
        return "token"
    if "key" in key:
        return "api_key"
    return "secret"


RULES: tuple[Rule, ...] = (
    # A whole PEM private key block; an unterminated one up to the next blank line or the end.
    Rule("private_key", re.compile(
        r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|.*?(?=\n[ \t]*\n)|.*\Z)",
        re.DOTALL)),
    Rule("private_key", re.compile(r"PuTTY-User-Key-File-\d+:.*?(?:Private-MAC: \S+|\Z)", re.DOTALL)),
    # scheme://user:password@host (JDBC, libpq, SQLAlchemy, AMQP, HTTP ...): the password only.
    Rule("password", re.compile(
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:(?P<secret>" + _NOT_MARKER + r"[^\s@/]+)@"),
        group="secret"),
    # Authorization header values (any scheme), then free-standing bearer tokens.
    Rule("authorization", re.compile(
        r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?:(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+)?+(?P<secret>" + _NOT_MARKER
        + r"[A-Za-z0-9._~+/=:-]+)"), group="secret"),
    Rule("bearer_token", re.compile(
        r"(?i)\bbearer[ \t]+(?P<secret>" + _NOT_MARKER + r"[A-Za-z0-9._~+/-]{8,}=*)"),
        group="secret"),
    # Vendor formats, recognisable without context; this archive's own API tokens first
    # (``mat_`` and 43 url-safe base64 characters: shared.auth.new_token).
    Rule("memarc_token", re.compile(r"\bmat_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")),
    Rule("aws_access_key", re.compile(r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b")),
    Rule("github_token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b")),
    Rule("github_token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b")),
    Rule("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    Rule("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    Rule("slack_webhook", re.compile(
        r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/+-]{20,}")),
    Rule("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,99}\b")),
    Rule("google_api_key", re.compile(r"\bAIza[A-Za-z0-9_-]{35,}")),
    Rule("openai_api_key", re.compile(r"\bsk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{20,}")),
    Rule("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36,}")),
    Rule("pypi_token", re.compile(r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}")),
    Rule("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")),
    # SQL: CREATE ROLE ... PASSWORD '...'; CREATE USER ... IDENTIFIED BY '...'.
    Rule("password", re.compile(
        r"(?i)\b(?:password|identified[ \t]+by)[ \t]+(?P<q>['\"])(?P<secret>" + _NOT_MARKER
        + r"[^'\"\n]*)(?P=q)"), group="secret"),
    # key=value, key: value, key => value, key := value with a secret-like key name; a quoted
    # value may hold spaces, an unquoted one ends at whitespace, a quote, , ; & ) ] } or <.
    Rule("secret", re.compile(
        r"(?i)" + _key_token(_SECRET_KEY) + r"[\"']?[ \t]*"
        r"(?::=|=>|==|[=:])[ \t]*(?:(?P<q>['\"`])(?P<qsecret>" + _NOT_MARKER
        + r"[^'\"`\n]+)(?P=q)|(?P<secret>" + _NOT_MARKER + r"[^\s'\"`,;&)\]}<]+))"),
        group="value", kind_of=_key_kind),
    # A long hex or base64 string after any *key* name (signing keys, account keys ...).
    Rule("api_key", re.compile(
        r"(?i)" + _key_token("key") + r"[\"']?[ \t]*(?::=|=>|[=:])[ \t]*[\"']?"
        r"(?P<secret>" + _NOT_MARKER + r"[A-Za-z0-9+/_-]{32,}={0,2})"), group="secret"),
)


def _apply(rule: Rule, text: str) -> str:
    if rule.group != "value":
        return rule.pattern.sub(rule.replace, text)

    def replace(match: re.Match[str]) -> str:  # key=value: the quoted or the bare value
        group = "qsecret" if match.group("qsecret") is not None else "secret"
        return Rule(rule.kind, rule.pattern, group, rule.kind_of).replace(match)

    return rule.pattern.sub(replace, text)


class PrivacyFilter:
    """Redacts obvious secrets from text sent to the embedding model or stored in the index.

    :param max_chars: longest text accepted; a longer one raises :class:`PrivacyFilterFailed`
        (``MEMARC_PRIVACY_MAX_CHARS``).
    """

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS, rules: tuple[Rule, ...] = RULES) -> None:
        self.max_chars = max_chars
        self.rules = rules

    def redact(self, text: str) -> str:
        """``text`` with every recognised secret replaced by ``[REDACTED:<kind>]``.

        Idempotent: redacting a redacted text changes nothing.

        :raises PrivacyFilterFailed: the text is longer than ``max_chars``, still matches a rule
            after redaction, or the filter itself failed. The message never contains the text.
        """
        if len(text) > self.max_chars:
            raise PrivacyFilterFailed(
                f"privacy filter refused a text of {len(text):,} characters (limit "
                f"{self.max_chars:,}, MEMARC_PRIVACY_MAX_CHARS); nothing was sent")
        try:
            for _ in range(MAX_PASSES):
                before = text
                for rule in self.rules:
                    text = _apply(rule, text)
                if text == before:
                    return text
        except Exception as exc:  # a bug in a rule must not let the text through
            raise PrivacyFilterFailed(
                f"privacy filter failed ({type(exc).__name__}); nothing was sent") from exc
        raise PrivacyFilterFailed(
            f"privacy filter did not converge after {MAX_PASSES} passes; nothing was sent")

    def redact_optional(self, value: str | None) -> str | None:
        """:meth:`redact` for an optional value (None stays None)."""
        return None if value is None else self.redact(value)


DEFAULT_FILTER = PrivacyFilter()
