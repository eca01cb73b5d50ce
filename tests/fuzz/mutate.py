"""Mutations the families share: token-level edits of program text, hostile characters
and integers, and hostile values put at paths of JSON documents."""

from __future__ import annotations

import json
import random
import re

from tests.fuzz.case import shorten

TOKEN_RE = re.compile(r'Q_"[^"\n]*"|"[^"\n]*"|\'[^\'\n]*\'|\w+|\s+|[^\w\s]')
UNICODE_POOL = [
    "\u2212",  # minus sign
    "≤",
    "≥",
    "∧",
    "∨",
    "¬",
    "≡",
    "≠",
    "⊤",
    "⊥",
    "∃←",
    "←",
    "ε",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\u2029",
    "\u0085",
    "\ufeff",
    "\u200b",
    "\u202e",
    "\x00",
    "\x0b",
    "\x0c",
    "\r",
    "\t",
    "\u0301",  # combining acute
    "é",
    "ß",
    "字",
    "🙂",
    "\U0001f600",
    "\ud800",  # lone surrogate
    "١",  # Arabic-indic digit one
    "Ⅻ",
    "ｉ",  # fullwidth i
]


def random_unicode(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(UNICODE_POOL)
    lo, hi = rng.choice(
        [
            (0x20, 0x7E),
            (0x80, 0x2FF),
            (0x370, 0x3FF),
            (0x2000, 0x2BFF),
            (0x4E00, 0x4E80),
            (0x1F300, 0x1F64F),
            (0xE000, 0xE010),
        ]
    )
    return chr(rng.randint(lo, hi))


def huge_int(rng: random.Random) -> str:
    choice = rng.randrange(9)
    if choice == 0:
        return "9" * rng.choice([20, 309, 4299, 4300, 4301, 5000])
    return str(
        rng.choice(
            [0, 1, 10**9, 10**9 + 1, 999_999_999, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30]
        )
    )


def mutate_tokens(
    text: str, rng: random.Random, pool: list[str], count: int
) -> tuple[str, list[str]]:
    """Apply ``count`` token-level mutations; returns the text and a description."""
    tokens = TOKEN_RE.findall(text) or [""]
    described = []
    for _ in range(count):
        op = rng.choice(
            ["delete", "insert", "insert", "swap", "replace", "duplicate", "unicode", "int"]
        )
        k = rng.randrange(len(tokens))
        if op == "delete" and len(tokens) > 1:
            described.append(f"delete {tokens[k]!r}@{k}")
            del tokens[k]
        elif op == "insert":
            new = rng.choice(pool + [t for t in tokens if t.strip()][:50])
            tokens.insert(k, new)
            described.append(f"insert {new!r}@{k}")
        elif op == "swap":
            j = rng.randrange(len(tokens))
            tokens[k], tokens[j] = tokens[j], tokens[k]
            described.append(f"swap @{k}<->@{j}")
        elif op == "replace":
            new = rng.choice(pool)
            described.append(f"replace {tokens[k]!r}@{k} by {new!r}")
            tokens[k] = new
        elif op == "duplicate":
            j = rng.randrange(len(tokens))
            span = tokens[min(k, j) : max(k, j) + 1][:40]
            tokens[k:k] = span
            described.append(f"duplicate {len(span)} tokens @{k}")
        elif op == "unicode":
            new = random_unicode(rng)
            tokens.insert(k, new)
            described.append(f"insert {new!r}@{k}")
        else:
            numbers = [i for i, t in enumerate(tokens) if t.isdigit()]
            j = rng.choice(numbers) if numbers else k
            new = huge_int(rng)
            described.append(f"int {tokens[j]!r}@{j} -> {shorten(new, 40)}")
            tokens[j] = new
    return "".join(tokens), described


DELETE = object()  # set_path: delete the field
DEEP = "__DEEP__"  # dump_header: 100,000 nested lists in its place


def json_paths(node, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += json_paths(v, (*prefix, k))
    elif isinstance(node, list):
        for k, v in enumerate(node[:6]):
            out += json_paths(v, (*prefix, k))
    return out


def set_path(node, path, value):
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        if isinstance(node, dict):
            del node[path[-1]]
        else:
            node.pop(path[-1])
    else:
        node[path[-1]] = value


def hostile_json(rng: random.Random):
    return rng.choice(
        [
            None,
            True,
            False,
            0,
            -1,
            1.5,
            "x",
            "",
            [],
            {},
            [1, 2],
            {"a": 1},
            1e308,
            -1e308,
            float("nan"),
            float("inf"),
            10**400,
            2**63,
            -(2**63) - 1,
            "9" * 5000,
            "\u0000",
            "\ud800",
            "<bos>",
            "x" * 100_000,
            DEEP,
        ]
    )


def dump_header(header) -> str:
    text = json.dumps(header, allow_nan=True)
    if DEEP in text:
        depth = 100_000
        text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth, 1)
    return text
