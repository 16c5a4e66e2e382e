"""The glob patterns Argo CD matches with github.com/gobwas/glob v0.2.3 (argo-cd@v3.5.1:util/glob/glob.go
Match), as a directory source's ``include``/``exclude`` uses them (directory.py, its only caller:
AppProject patterns are read as literal text or "*" alone, trainyard/repo/validate/argo.py).

The syntax (gobwas/glob syntax/lexer/lexer.go, syntax/ast/parser.go): ``*`` any run of characters
other than the separators, ``**`` any run at all, ``?`` one character other than a separator,
``[abc]``/``[!abc]``/``[a-z]``/``[!a-z]`` one character in (or not in) the list or range,
``{a,b,...}`` alternatives (nested; ``,`` and ``}`` are special only inside braces, an unclosed
``{`` ends with the pattern), ``\\`` makes the next character literal. A NUL character ends the
pattern. A pattern that does not compile (an unterminated or empty ``[...]``, a range from high to
low, a U+FFFD character) matches nothing, as util/glob.Match returns false for it.

The library's matching is not the textbook one (``b*b`` matches ``b``, a lone ``?`` matches the
empty string, some patterns with empty alternatives panic), so this module is a port of its
compiler (compiler/compiler.go) and matchers (match/*.go), working on UTF-8 bytes with byte offsets
as the Go code does; where the Go code would panic, :class:`GlobPanic` is raised and the caller
refuses the pattern by name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

RUNE_ERROR = 0xFFFD


class GlobSyntaxError(ValueError):
    """The pattern does not compile (gobwas/glob returns an error; Argo CD's Match is then false)."""


class GlobPanic(RuntimeError):
    """gobwas/glob's matcher would panic (a slice out of range) on this pattern and text."""


# ---------------------------------------------------------------------------------------------
# UTF-8 as Go's unicode/utf8 reads it


def _decode_rune(s: bytes, i: int = 0) -> tuple[int, int]:
    """utf8.DecodeRune(s[i:]): (rune, width); (RuneError, 1) for an invalid byte, (RuneError, 0) at the end."""
    n = len(s) - i
    if n <= 0:
        return RUNE_ERROR, 0
    b0 = s[i]
    if b0 < 0x80:
        return b0, 1
    if 0xC2 <= b0 <= 0xDF:
        size, lo, hi, value = 2, 0x80, 0xBF, b0 & 0x1F
    elif 0xE0 <= b0 <= 0xEF:
        size, value = 3, b0 & 0x0F
        lo, hi = (0xA0, 0xBF) if b0 == 0xE0 else (0x80, 0x9F) if b0 == 0xED else (0x80, 0xBF)
    elif 0xF0 <= b0 <= 0xF4:
        size, value = 4, b0 & 0x07
        lo, hi = (0x90, 0xBF) if b0 == 0xF0 else (0x80, 0x8F) if b0 == 0xF4 else (0x80, 0xBF)
    else:
        return RUNE_ERROR, 1
    if n < size or not lo <= s[i + 1] <= hi:
        return RUNE_ERROR, 1
    value = value << 6 | s[i + 1] & 0x3F
    for k in range(2, size):
        if not 0x80 <= s[i + k] <= 0xBF:
            return RUNE_ERROR, 1
        value = value << 6 | s[i + k] & 0x3F
    return value, size


def _runes(s: bytes) -> list[tuple[int, int]]:
    """``for i, r := range s``: (byte offset, rune) pairs."""
    out, i = [], 0
    while i < len(s):
        r, w = _decode_rune(s, i)
        out.append((i, r))
        i += w
    return out


def _rune_len(r: int) -> int:
    if r < 0:
        return -1
    if r < 0x80:
        return 1
    if r < 0x800:
        return 2
    if 0xD800 <= r <= 0xDFFF:
        return -1
    if r < 0x10000:
        return 3
    return 4 if r <= 0x10FFFF else -1


def _count(s: bytes) -> int:
    return len(_runes(s))


def _cut(s: bytes, lo: int, hi: int | None = None) -> bytes:
    """s[lo:hi] that panics, as Go's slicing does, when the bounds are out of range."""
    hi = len(s) if hi is None else hi
    if not 0 <= lo <= hi <= len(s):
        raise GlobPanic(f"slice bounds out of range [{lo}:{hi}] with length {len(s)}")
    return s[lo:hi]


def _index_rune(s: bytes, r: int) -> int:
    """strings.IndexRune."""
    if 0 <= r < 0x80:
        return s.find(bytes([r]))
    for i, c in _runes(s):
        if c == r:
            return i
    return -1


def _index_any_runes(s: bytes, rs: tuple[int, ...]) -> int:
    """util/strings.IndexAnyRunes: the first separator found, in the order of the separators."""
    for r in rs:
        i = _index_rune(s, r)
        if i != -1:
            return i
    return -1


def _last_index_any_runes(s: bytes, rs: tuple[int, ...]) -> int:
    for r in rs:
        if not 0 <= r < 0x80:  # the library's non-ASCII branch loops on a fixed index; Argo CD passes '/' only
            raise GlobPanic("non-ASCII separator")
        i = s.rfind(bytes([r]))
        if i != -1:
            return i
    return -1


# ---------------------------------------------------------------------------------------------
# Lexer and parser (syntax/lexer/lexer.go, syntax/ast/parser.go)

_BREAK_TEXT = frozenset("?*[{")
_BREAK_TERMS = _BREAK_TEXT | {"}", ","}


class _Lexer:
    def __init__(self, source: str) -> None:
        self.data = source
        self.pos = 0
        self.tokens: list[tuple[str, str]] = []
        self.terms = 0
        self.last = 0

    def _peek(self) -> str:
        if self.pos >= len(self.data):
            return ""
        c = self.data[self.pos]
        if c == "\ufffd" or "\ud800" <= c <= "\udfff":  # utf8.RuneError: "could not read rune"
            raise GlobSyntaxError("could not read rune")
        return "" if c == "\x00" else c  # the lexer's eof rune is 0

    def _read(self) -> str:
        c = self._peek()
        self.last = 1 if c else 0
        self.pos += self.last
        return c

    def _unread(self) -> None:
        self.pos -= self.last
        self.last = 0

    def run(self) -> list[tuple[str, str]]:
        while True:
            c = self._read()
            if not c:
                self.tokens.append(("eof", ""))
                return self.tokens
            if c == "{":
                self.terms += 1
                self.tokens.append(("terms_open", c))
            elif c == "," and self.terms:
                self.tokens.append(("separator", c))
            elif c == "}" and self.terms:
                self.tokens.append(("terms_close", c))
                self.terms -= 1
            elif c == "[":
                self.tokens.append(("range_open", c))
                self._range()
            elif c == "?":
                self.tokens.append(("single", c))
            elif c == "*":
                if self._read() == "*":
                    self.tokens.append(("super", "**"))
                else:
                    self._unread()
                    self.tokens.append(("any", c))
            else:
                self._unread()
                self._text(_BREAK_TERMS if self.terms else _BREAK_TEXT)

    def _range(self) -> None:
        want_hi = want_close = seen_not = False
        while True:
            c = self._read()
            if not c:
                raise GlobSyntaxError("unexpected end of input")
            if want_close:
                if c != "]":
                    raise GlobSyntaxError("expected close range character")
                self.tokens.append(("range_close", c))
                return
            if want_hi:
                self.tokens.append(("range_hi", c))
                want_close = True
                continue
            if not seen_not and c == "!":
                self.tokens.append(("not", c))
                seen_not = True
                continue
            if self._peek() == "-":
                self.pos += 1
                self.tokens.append(("range_lo", c))
                want_hi = True
                continue
            self._unread()
            self._text(frozenset("]"))
            want_close = True

    def _text(self, breakers: frozenset[str]) -> None:
        data: list[str] = []
        escaped = False
        while True:
            c = self._read()
            if not c:
                break
            if not escaped:
                if c == "\\":
                    escaped = True
                    continue
                if c in breakers:
                    self._unread()
                    break
            escaped = False
            data.append(c)
        if data:
            self.tokens.append(("text", "".join(data)))


@dataclass(eq=False)
class _Node:
    kind: str  # nothing, pattern, list, range, text, any, super, single, any_of
    value: tuple | None = None  # list: (not, chars); range: (not, lo, hi); text: (text,)
    children: list[_Node] | None = None
    parent: _Node | None = None

    def __post_init__(self) -> None:
        if self.children is None:
            self.children = []

    def insert(self, *nodes: _Node) -> None:
        for n in nodes:
            self.children.append(n)  # type: ignore[union-attr]
            n.parent = self

    def equal(self, other: _Node) -> bool:
        """ast.Node.Equal (and what reflect.DeepEqual compares here): kind, value, children."""
        if self.kind != other.kind or self.value != other.value or len(self.kids) != len(other.kids):
            return False
        return all(a.equal(b) for a, b in zip(self.kids, other.kids, strict=True))

    @property
    def kids(self) -> list[_Node]:
        return self.children  # type: ignore[return-value]


def _new(kind: str, value: tuple | None = None, *children: _Node) -> _Node:
    n = _Node(kind, value)
    n.insert(*children)
    return n


def _parse(pattern: str) -> _Node:
    tokens = _Lexer(pattern).run()
    root = _Node("pattern")
    tree = root
    i = 0
    while True:
        kind, raw = tokens[i]
        i += 1
        if kind == "eof":
            return root
        if kind == "text":
            tree.insert(_Node("text", (raw,)))
        elif kind in ("any", "super", "single"):
            tree.insert(_Node(kind))
        elif kind == "terms_open":
            a = _Node("any_of")
            tree.insert(a)
            p = _Node("pattern")
            a.insert(p)
            tree = p
        elif kind == "separator":
            p = _Node("pattern")
            tree.parent.insert(p)  # type: ignore[union-attr]
            tree = p
        elif kind == "terms_close":
            tree = tree.parent.parent  # type: ignore[union-attr,assignment]
        elif kind == "range_open":
            negate, lo, hi, chars = False, "", "", ""
            while True:
                kind, raw = tokens[i]
                i += 1
                if kind == "eof":
                    raise GlobSyntaxError("unexpected end")
                if kind == "not":
                    negate = True
                elif kind == "range_lo":
                    lo = raw
                elif kind == "range_hi":
                    hi = raw
                    if hi < lo:
                        raise GlobSyntaxError(f"hi character {hi!r} should be greater than lo {lo!r}")
                elif kind == "text":
                    chars = raw
                elif kind == "range_close":
                    is_range = bool(lo) and bool(hi)
                    if bool(chars) == is_range:
                        raise GlobSyntaxError("could not parse range")
                    if is_range:
                        tree.insert(_Node("range", (negate, ord(lo), ord(hi))))
                    else:
                        tree.insert(_Node("list", (negate, tuple(ord(c) for c in chars))))
                    break
        else:  # pragma: no cover - the lexer makes no other token
            raise GlobSyntaxError(f"unexpected token: {kind}")


# ---------------------------------------------------------------------------------------------
# Matchers (match/*.go). len() is the length in runes (-1: not fixed); index(s) is (byte offset, the
# byte lengths of the matches starting there) or (-1, []).

NO_LEN = -1


class _M:
    def length(self) -> int:
        return NO_LEN


@dataclass(frozen=True)
class Nothing(_M):
    def match(self, s: bytes) -> bool:
        return len(s) == 0

    def index(self, s: bytes) -> tuple[int, list[int]]:
        return 0, [0]

    def length(self) -> int:
        return 0


@dataclass(frozen=True)
class Super(_M):
    def match(self, s: bytes) -> bool:
        return True

    def index(self, s: bytes) -> tuple[int, list[int]]:
        return 0, [i for i, _ in _runes(s)] + [len(s)]


@dataclass(frozen=True)
class Any(_M):
    separators: tuple[int, ...]

    def match(self, s: bytes) -> bool:
        return _index_any_runes(s, self.separators) == -1

    def index(self, s: bytes) -> tuple[int, list[int]]:
        found = _index_any_runes(s, self.separators)
        if found == 0:
            return 0, [0]
        if found > 0:
            s = s[:found]
        return 0, [i for i, _ in _runes(s)] + [len(s)]


@dataclass(frozen=True)
class Single(_M):
    separators: tuple[int, ...]

    def match(self, s: bytes) -> bool:
        r, w = _decode_rune(s)
        if len(s) > w:
            return False
        return r not in self.separators

    def index(self, s: bytes) -> tuple[int, list[int]]:
        for i, r in _runes(s):
            if r not in self.separators:
                return i, [_rune_len(r)]
        return -1, []

    def length(self) -> int:
        return 1


@dataclass(frozen=True)
class List(_M):
    chars: tuple[int, ...]
    negate: bool

    def match(self, s: bytes) -> bool:
        r, w = _decode_rune(s)
        if len(s) > w:
            return False
        return (r in self.chars) == (not self.negate)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        for i, r in _runes(s):
            if self.negate == (r not in self.chars):
                return i, [_rune_len(r)]
        return -1, []

    def length(self) -> int:
        return 1


@dataclass(frozen=True)
class Range(_M):
    lo: int
    hi: int
    negate: bool

    def match(self, s: bytes) -> bool:
        r, w = _decode_rune(s)
        if len(s) > w:
            return False
        return (self.lo <= r <= self.hi) == (not self.negate)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        for i, r in _runes(s):
            if self.negate != (self.lo <= r <= self.hi):
                return i, [_rune_len(r)]
        return -1, []

    def length(self) -> int:
        return 1


@dataclass(frozen=True)
class Text(_M):
    text: bytes

    def match(self, s: bytes) -> bool:
        return s == self.text

    def index(self, s: bytes) -> tuple[int, list[int]]:
        i = s.find(self.text)
        return (i, [len(self.text)]) if i != -1 else (-1, [])

    def length(self) -> int:
        return _count(self.text)


@dataclass(frozen=True)
class Prefix(_M):
    prefix: bytes

    def match(self, s: bytes) -> bool:
        return s.startswith(self.prefix)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        idx = s.find(self.prefix)
        if idx == -1:
            return -1, []
        n = len(self.prefix)
        sub = s[idx + n :] if len(s) > idx + n else b""
        return idx, [n] + [n + i + _rune_len(r) for i, r in _runes(sub)]


@dataclass(frozen=True)
class Suffix(_M):
    suffix: bytes

    def match(self, s: bytes) -> bool:
        return s.endswith(self.suffix)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        idx = s.find(self.suffix)
        return (0, [idx + len(self.suffix)]) if idx != -1 else (-1, [])


@dataclass(frozen=True)
class PrefixAny(_M):
    prefix: bytes
    separators: tuple[int, ...]

    def match(self, s: bytes) -> bool:
        return s.startswith(self.prefix) and _index_any_runes(s[len(self.prefix) :], self.separators) == -1

    def index(self, s: bytes) -> tuple[int, list[int]]:
        idx = s.find(self.prefix)
        if idx == -1:
            return -1, []
        n = len(self.prefix)
        sub = s[idx + n :]
        i = _index_any_runes(sub, self.separators)
        if i > -1:
            sub = sub[:i]
        return idx, [n] + [n + j + _rune_len(r) for j, r in _runes(sub)]


@dataclass(frozen=True)
class SuffixAny(_M):
    suffix: bytes
    separators: tuple[int, ...]

    def match(self, s: bytes) -> bool:
        if not s.endswith(self.suffix):
            return False
        return _index_any_runes(s[: len(s) - len(self.suffix)], self.separators) == -1

    def index(self, s: bytes) -> tuple[int, list[int]]:
        idx = s.find(self.suffix)
        if idx == -1:
            return -1, []
        i = _last_index_any_runes(s[:idx], self.separators) + 1
        return i, [idx + len(self.suffix) - i]


@dataclass(frozen=True)
class PrefixSuffix(_M):
    prefix: bytes
    suffix: bytes

    def match(self, s: bytes) -> bool:
        return s.startswith(self.prefix) and s.endswith(self.suffix)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        prefix_idx = s.find(self.prefix)
        if prefix_idx == -1:
            return -1, []
        n = len(self.suffix)
        if n <= 0:
            return prefix_idx, [len(s) - prefix_idx]
        if len(s) - prefix_idx <= 0:
            return -1, []
        segments = []
        sub = s[prefix_idx:]
        while True:
            j = sub.rfind(self.suffix)
            if j == -1:
                break
            segments.append(j + n)
            sub = sub[:j]
        if not segments:
            return -1, []
        segments.reverse()
        return prefix_idx, segments


@dataclass(frozen=True)
class Contains(_M):
    needle: bytes
    negate: bool

    def match(self, s: bytes) -> bool:
        return (self.needle in s) != self.negate

    def index(self, s: bytes) -> tuple[int, list[int]]:
        offset = 0
        idx = s.find(self.needle)
        if not self.negate:
            if idx == -1:
                return -1, []
            offset = idx + len(self.needle)
            if len(s) <= offset:
                return 0, [offset]
            s = s[offset:]
        elif idx != -1:
            s = s[:idx]
        return 0, [offset + i for i, _ in _runes(s)] + [offset + len(s)]


@dataclass(frozen=True)
class Min(_M):
    limit: int

    def match(self, s: bytes) -> bool:
        return _count(s) >= self.limit if self.limit > 0 else bool(s)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        if len(s) - self.limit + 1 <= 0:
            return -1, []
        segments = []
        for count, (i, r) in enumerate(_runes(s), 1):
            if count >= self.limit:
                segments.append(i + _rune_len(r))
        return (0, segments) if segments else (-1, [])


@dataclass(frozen=True)
class Max(_M):
    limit: int

    def match(self, s: bytes) -> bool:
        return _count(s) <= self.limit

    def index(self, s: bytes) -> tuple[int, list[int]]:
        segments = [0]
        for count, (i, r) in enumerate(_runes(s), 1):
            if count > self.limit:
                break
            segments.append(i + _rune_len(r))
        return 0, segments


@dataclass(frozen=True)
class AnyOf(_M):
    matchers: tuple

    def match(self, s: bytes) -> bool:
        return any(m.match(s) for m in self.matchers)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        index, segments = -1, []
        for m in self.matchers:
            idx, seg = m.index(s)
            if idx == -1:
                continue
            if index == -1 or idx < index:
                index, segments = idx, list(seg)
                continue
            if idx > index:
                continue
            segments = _append_merge(segments, seg)
        return (index, segments) if index != -1 else (-1, [])

    def length(self) -> int:
        n = -1
        for m in self.matchers:
            ml = m.length()
            if n == -1:
                n = ml
                continue
            if ml == -1 or n != ml:
                return -1
        return n


@dataclass(frozen=True)
class EveryOf(_M):
    matchers: tuple

    def match(self, s: bytes) -> bool:
        return all(m.match(s) for m in self.matchers)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        index = offset = 0
        current: list[int] = []
        sub = s
        for i, m in enumerate(self.matchers):
            idx, seg = m.index(sub)
            if idx == -1:
                return -1, []
            if i == 0:
                current = list(seg)
            else:
                delta = index - (idx + offset)
                nxt = [n for ex in current for n in seg if ex + delta == n]
                if not nxt:
                    return -1, []
                current = nxt
            index = idx + offset
            sub = _cut(s, index)
            offset += idx
        return index, current

    def length(self) -> int:
        n = 0
        for m in self.matchers:
            ml = m.length()
            if n > 0:
                n += ml
            else:
                return -1
        return n


@dataclass(frozen=True)
class Row(_M):
    matchers: tuple
    runes_length: int

    def _match_all(self, s: bytes) -> bool:
        idx = 0
        for m in self.matchers:
            length = m.length()
            nxt = i = 0
            for offset, _ in _runes(_cut(s, idx)):  # Go keeps the last offset after the loop
                nxt = offset
                i += 1
                if i == length:
                    break
            if i < length or not m.match(_cut(s, idx, idx + nxt + 1)):
                return False
            idx += nxt + 1
        return True

    def _len_ok(self, s: bytes) -> bool:
        return _count(s) == self.runes_length

    def match(self, s: bytes) -> bool:
        return self._len_ok(s) and self._match_all(s)

    def index(self, s: bytes) -> tuple[int, list[int]]:
        for i, _ in _runes(s):
            if len(s) - i < self.runes_length:
                break
            if self._match_all(s[i:]):
                return i, [self.runes_length]
        return -1, []

    def length(self) -> int:
        return self.runes_length


@dataclass(frozen=True)
class BTree(_M):
    value: _M
    left: _M | None
    right: _M | None
    value_len: int
    left_len: int
    right_len: int
    total_len: int

    def length(self) -> int:
        return self.total_len

    def index(self, s: bytes) -> tuple[int, list[int]]:
        return -1, []

    def match(self, s: bytes) -> bool:
        n = len(s)
        if self.total_len != -1 and self.total_len > n:
            return False
        offset = self.left_len if self.left_len >= 0 else 0
        limit = n - self.right_len if self.right_len >= 0 else n
        while offset < limit:
            index, segments = self.value.index(_cut(s, offset, limit))
            if index == -1:
                return False
            head = _cut(s, 0, offset + index)
            left = self.left.match(head) if self.left is not None else head == b""
            if left:
                for length in reversed(segments):
                    rest = b"" if n <= offset + index + length else _cut(s, offset + index + length)
                    right = self.right.match(rest) if self.right is not None else rest == b""
                    if right:
                        return True
            _, step = _decode_rune(s, offset + index)
            offset += index + step
        return False


def _btree(value: _M, left: _M | None, right: _M | None) -> BTree:
    ok = True
    value_len = value.length()
    ok = ok and value_len != -1
    left_len = right_len = 0
    if left is not None:
        left_len = left.length()
        ok = ok and left_len != -1
    if right is not None:
        right_len = right.length()
        ok = ok and right_len != -1
    total = left_len + value_len + right_len if ok else -1
    return BTree(value, left, right, value_len, left_len, right_len, total)


def _append_merge(target: list[int], sub: list[int]) -> list[int]:
    out, x, y = [], 0, 0
    while x < len(target) or y < len(sub):
        if x >= len(target):
            out += sub[y:]
            break
        if y >= len(sub):
            out += target[x:]
            break
        a, b = target[x], sub[y]
        if a == b:
            out.append(a)
            x += 1
            y += 1
        elif a < b:
            out.append(a)
            x += 1
        else:
            out.append(b)
            y += 1
    return out


# ---------------------------------------------------------------------------------------------
# Compiler (compiler/compiler.go)


def _optimize(m: _M | None) -> _M | None:
    if isinstance(m, Any):
        return Super() if not m.separators else m
    if isinstance(m, AnyOf):
        return m.matchers[0] if len(m.matchers) == 1 else m
    if isinstance(m, List):
        return Text(bytes(chr(m.chars[0]), "utf-8")) if not m.negate and len(m.chars) == 1 else m
    if isinstance(m, BTree):
        m = replace(m, left=_optimize(m.left), right=_optimize(m.right))
        if not isinstance(m.value, Text):
            return m
        r = m.value.text
        left_nil, right_nil = m.left is None, m.right is None
        if left_nil and right_nil:
            return Text(r)
        left_super, right_super = isinstance(m.left, Super), isinstance(m.right, Super)
        if left_super and right_super:
            return Contains(r, False)
        if left_super and right_nil:
            return Suffix(r)
        if right_super and left_nil:
            return Prefix(r)
        if left_nil and isinstance(m.right, Suffix):
            return PrefixSuffix(r, m.right.suffix)
        if right_nil and isinstance(m.left, Prefix):
            return PrefixSuffix(m.left.prefix, r)
        if right_nil and isinstance(m.left, Any):
            return SuffixAny(r, m.left.separators)
        if left_nil and isinstance(m.right, Any):
            return PrefixAny(r, m.right.separators)
        return m
    return m


def _compile_matchers(matchers: list[_M]) -> _M:
    if not matchers:
        raise GlobSyntaxError("compile error: need at least one matcher")
    if len(matchers) == 1:
        return matchers[0]
    glued = _glue(matchers)
    if glued is not None:
        return glued
    idx, max_len, val = -1, -1, None
    for i, m in enumerate(matchers):
        n = m.length()
        if n != -1 and n >= max_len:
            max_len, idx, val = n, i, m
    if val is None:
        return _btree(matchers[0], None, _compile_matchers(matchers[1:]))
    left, right = matchers[:idx], matchers[idx + 1 :]
    lm = _compile_matchers(left) if left else None
    rm = _compile_matchers(right) if right else None
    return _btree(val, lm, rm)


def _glue(matchers: list[_M]) -> _M | None:
    every = _glue_every(matchers)
    return every if every is not None else _glue_row(matchers)


def _glue_row(matchers: list[_M]) -> _M | None:
    if len(matchers) <= 1:
        return None
    total = 0
    for m in matchers:
        n = m.length()
        if n == -1:
            return None
        total += n
    return Row(tuple(matchers), total)


def _glue_every(matchers: list[_M]) -> _M | None:
    if len(matchers) <= 1:
        return None
    has_any = has_super = has_single = False
    minimum = 0
    separator: tuple[int, ...] = ()
    for i, m in enumerate(matchers):
        if isinstance(m, Super):
            sep: tuple[int, ...] = ()
            has_super = True
        elif isinstance(m, Any):
            sep = m.separators
            has_any = True
        elif isinstance(m, Single):
            sep = m.separators
            has_single = True
            minimum += 1
        elif isinstance(m, List):
            if not m.negate:
                return None
            sep = m.chars
            has_single = True
            minimum += 1
        else:
            return None
        if i == 0:
            separator = sep
        if sep != separator:
            return None
    if has_super and not has_any and not has_single:
        return Super()
    if has_any and not has_super and not has_single:
        return Any(separator)
    if (has_any or has_super) and minimum > 0 and not separator:
        return Min(minimum)
    parts: list[_M] = []
    if minimum > 0:
        parts.append(Min(minimum))
        if not has_any and not has_super:
            parts.append(Max(minimum))
    if separator:
        parts.append(Contains("".join(chr(c) for c in separator).encode("utf-8", "surrogatepass"), True))
    return EveryOf(tuple(parts))


def _minimize(matchers: list[_M]) -> list[_M]:
    done: _M | None = None
    left = right = count = 0
    for lo in range(len(matchers)):
        for hi in range(len(matchers), lo, -1):
            glued = _glue(matchers[lo:hi])
            if glued is None:
                continue
            if done is None:
                swap = True
            else:
                cl, gl = done.length(), glued.length()
                swap = cl > -1 and gl > -1 and gl > cl
                swap = swap or count < hi - lo
            if swap:
                done, left, right, count = glued, lo, hi, hi - lo
    if done is None:
        return matchers
    nxt = [*matchers[:left], done, *matchers[right:]]
    if len(nxt) == len(matchers):
        return nxt
    return _minimize(nxt)


def _minimize_any_of(tree: _Node) -> _Node | None:
    if any(c.kind != "pattern" for c in tree.kids):
        return None
    common_left, common_right = _common_children(tree.kids)
    nl, nr = len(common_left), len(common_right)
    if nl == 0 and nr == 0:
        return None
    result: list[_Node] = []
    if nl > 0:
        result.append(_new("pattern", None, *common_left))
    any_of: list[_Node] = []
    for child in tree.kids:
        reuse = child.kids[nl : len(child.kids) - nr]
        node = _Node("nothing") if not reuse else _new("pattern", None, *reuse)
        if not any(n.equal(node) for n in any_of):
            any_of.append(node)
    if len(any_of) == 1 and any_of[0].kind != "nothing":
        result.append(any_of[0])
    elif len(any_of) > 1:
        result.append(_new("any_of", None, *any_of))
    if nr > 0:
        result.append(_new("pattern", None, *common_right))
    return _new("pattern", None, *result)


def _common_children(nodes: list[_Node]) -> tuple[list[_Node], list[_Node]]:
    if len(nodes) <= 1:
        return [], []
    idx, least = -1, -1
    for i, n in enumerate(nodes):
        if idx == -1 or len(n.kids) < least:
            least, idx = len(n.kids), i
    tree = nodes[idx]
    tree_len = len(tree.kids)
    common_left: list[_Node] = []
    common_right: list[_Node | None] = [None] * tree_len
    last_right = tree_len
    break_left = break_right = False
    total = 0
    i, j = 0, tree_len - 1
    while total < tree_len and j >= 0 and not (break_left and break_right):
        tree_left, tree_right = tree.kids[i], tree.kids[j]
        k = 0
        while k < len(nodes) and not (break_left and break_right):
            if k != idx:
                rest_left = nodes[k].kids[i]
                rest_right = nodes[k].kids[j + len(nodes[k].kids) - tree_len]
                break_left = break_left or not tree_left.equal(rest_left)
                break_right = break_right or (not break_left and j <= i)
                break_right = break_right or not tree_right.equal(rest_right)
            k += 1
        if not break_left:
            total += 1
            common_left.append(tree_left)
        if not break_right:
            total += 1
            last_right = j
            common_right[j] = tree_right
        i, j = i + 1, j - 1
    return common_left, [n for n in common_right[last_right:] if n is not None]


def _compile(tree: _Node, sep: tuple[int, ...]) -> _M:
    kind = tree.kind
    if kind == "any_of":
        n = _minimize_any_of(tree)
        if n is not None:
            return _compile(n, sep)
        return AnyOf(tuple(_optimize(_compile(c, sep)) for c in tree.kids))  # type: ignore[misc]
    if kind == "pattern":
        if not tree.kids:
            return Nothing()
        matchers = [_optimize(_compile(c, sep)) for c in tree.kids]
        m: _M | None = _compile_matchers(_minimize(matchers))  # type: ignore[arg-type]
    elif kind == "any":
        m = Any(sep)
    elif kind == "super":
        m = Super()
    elif kind == "single":
        m = Single(sep)
    elif kind == "nothing":
        m = Nothing()
    elif kind == "list":
        negate, chars = tree.value  # type: ignore[misc]
        m = List(chars, negate)
    elif kind == "range":
        negate, lo, hi = tree.value  # type: ignore[misc]
        m = Range(lo, hi, negate)
    elif kind == "text":
        m = Text(tree.value[0].encode("utf-8"))  # type: ignore[index]
    else:  # pragma: no cover
        raise GlobSyntaxError("could not compile tree: unknown node type")
    return _optimize(m)  # type: ignore[return-value]


@lru_cache(maxsize=4096)
def compile_glob(pattern: str, separators: str = "") -> _M | None:
    """The compiled matcher, or None where gobwas/glob refuses the pattern (bounded cache, like util/glob's)."""
    try:
        return _compile(_parse(pattern), tuple(ord(c) for c in separators))
    except GlobSyntaxError:
        return None


def glob_match(pattern: str, text: str, separators: str = "") -> bool:
    """argo-cd@v3.5.1:util/glob/glob.go Match: false for a pattern that does not compile. Raises
    GlobPanic where the library would panic."""
    compiled = compile_glob(pattern, separators)
    if compiled is None:
        return False
    return compiled.match(text.encode("utf-8", "surrogateescape"))
