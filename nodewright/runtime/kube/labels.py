"""Label syntax as the API server checks it (apimachinery's label key and value validation).

A label value is empty or at most 63 characters of ASCII letters, digits, "-", "_" and ".",
beginning and ending with a letter or digit. A key is a name of the same form (not empty) with an
optional prefix and "/": a DNS subdomain of at most 253 characters. Owns ``label_key_problem`` and
``label_value_problem`` (why a key or value is invalid, or None) and ``shown`` (a long text cut
short for a message). The cache's selector parser and the reconcilers' checks of selectors in
config and custom resources use them: a selector naming a value no object can carry never
matches, silently. Pure.
"""

from __future__ import annotations

import re

__all__ = ["NAME_LIMIT", "PREFIX_LIMIT", "label_key_problem", "label_value_problem", "shown"]

NAME_LIMIT = 63
"""The most characters a label value, or the name part of a key, may have."""
PREFIX_LIMIT = 253
"""The most characters a key's prefix (a DNS subdomain) may have."""

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_FORM = "ASCII letters, digits, '-', '_' and '.', beginning and ending with a letter or digit"
_SHOWN_LIMIT = 40


def shown(text: str) -> str:
    """``text`` quoted for a message, cut to its first 40 characters when longer."""
    if len(text) <= _SHOWN_LIMIT:
        return repr(text)
    return f"{text[:_SHOWN_LIMIT]!r}... ({len(text)} characters)"


def label_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a label value, or None when it can."""
    if len(value) > NAME_LIMIT:
        return f"is {len(value)} characters long; a label value has at most {NAME_LIMIT}"
    if value and not _NAME.fullmatch(value):
        return f"is not a label value: at most {NAME_LIMIT} {_NAME_FORM}"
    return None


def label_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a label key, or None when it can."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and len(prefix) <= PREFIX_LIMIT and _PREFIX.fullmatch(prefix)):
        return f"has a prefix that is not a DNS subdomain of at most {PREFIX_LIMIT} characters"
    if len(name) > NAME_LIMIT:
        return f"has a name part of {len(name)} characters; a label key's name has at most {NAME_LIMIT}"
    if not _NAME.fullmatch(name):
        return f"is not a label key: an optional prefix and '/', then 1-{NAME_LIMIT} {_NAME_FORM}"
    return None
