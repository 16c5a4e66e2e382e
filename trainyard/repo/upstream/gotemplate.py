"""The string templating of Argo CD's ApplicationSet controller: Go's text/template with Argo CD's
function map, and fasttemplate, for the parts an ApplicationSet of this repository may use.

argo-cd@v3.5.1:applicationset/utils/utils.go Render.Replace renders one string:

- ``goTemplate: true``: the string is parsed by Go's text/template (go 1.26, the toolchain of
  argo-cd@v3.5.1:go.mod) with Sprig v3.3.0's GenericFuncMap less ``env``, ``expandenv`` and
  ``getHostByName``, plus Argo CD's ``normalize``, ``slugify``, ``toYaml``, ``fromYaml`` and
  ``fromYamlArray``, then executed on the parameters. :func:`render` follows text/template's lexer
  (``{{-``/``-}}`` trimming, comments, quoted strings that hold ``}}``), its parser (pipelines,
  parenthesised pipelines, field chains, ``$``) and its execution for map parameters: a missing key
  prints ``<no value>`` (``missingkey=default``/``invalid``), is the zero value of the map's element
  type (``missingkey=zero``: ``<no value>`` for Argo CD's ``map[string]any`` parameters, ``""`` for
  the ``values`` map, a ``map[string]string``), or fails (``missingkey=error``); a field of a
  missing value is ``<no value>``, or an error under ``missingkey=zero`` (nil interface). Functions
  followed exactly: ``index`` (text/template funcs.go; a string indexes its UTF-8 bytes),
  ``normalize`` (utils.SanitizeName), Sprig's ``lower``, ``upper``, ``trunc``, ``replace``,
  ``trimPrefix`` and ``trimSuffix``. Every other function of the map, the actions ``if``, ``range``,
  ``with``, ``define``, ``template``, ``block``, ``break``, ``continue``, variables (``$x :=``),
  character, float, hex, octal and complex constants are refused by name (:class:`NotEmulated`),
  never rendered differently. Text/template's own errors are :class:`TemplateError`, as they fail
  Argo CD's render.
- otherwise fasttemplate (valyala/fasttemplate v1.2.2) on ``{{``/``}}``: a tag whose
  whitespace-trimmed (Go's unicode.IsSpace) content is a parameter is replaced, any other tag is
  kept as it was; a string with no ``{{ ... }}`` on one line is returned untouched; an unclosed tag
  is an error (:func:`fasttemplate`).

Parsing and rendering are linear in the template; nesting and output are bounded.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_OUTPUT = 1_572_864  # kube-apiserver's request limit (etcd's 1.5 MiB): no Application holds more
MAX_PAREN_DEPTH = 100  # text/template allows 10000 (parse.go maxStackDepth); deeper is refused here

_SPACE = " \t\r\n"  # text/template lex.go isSpace / spaceChars
# Go's unicode.IsSpace (Latin-1 spaces and the White_Space property), which strings.TrimSpace uses
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501
_KEYWORDS = frozenset({"block", "break", "continue", "define", "else", "end", "if", "range", "template", "with"})

# text/template funcs.go builtins
_BUILTINS = "and call html index slice js len not or print printf println urlquery eq ge gt le lt ne"
# Sprig v3.3.0 functions.go genericMap (GenericFuncMap), less env, expandenv and getHostByName
_SPRIG = (
    "hello ago date date_in_zone date_modify dateInZone dateModify duration durationRound htmlDate htmlDateInZone "
    "must_date_modify mustDateModify mustToDate now toDate unixEpoch abbrev abbrevboth trunc trim upper lower title "
    "untitle substr repeat trimall trimAll trimSuffix trimPrefix nospace initials randAlphaNum randAlpha randAscii "
    "randNumeric swapcase shuffle snakecase camelcase kebabcase wrap wrapWith contains hasPrefix hasSuffix quote "
    "squote cat indent nindent replace plural sha1sum sha256sum sha512sum adler32sum toString atoi int64 int float64 "
    "seq toDecimal split splitList splitn toStrings until untilStep add1 add sub div mod mul randInt add1f addf subf "
    "divf mulf biggest max min maxf minf ceil floor round join sortAlpha default empty coalesce all any compact "
    "mustCompact fromJson toJson toPrettyJson toRawJson mustFromJson mustToJson mustToPrettyJson mustToRawJson "
    "ternary deepCopy mustDeepCopy typeOf typeIs typeIsLike kindOf kindIs deepEqual base dir clean ext isAbs osBase "
    "osClean osDir osExt osIsAbs b64enc b64dec b32enc b32dec tuple list dict get set unset hasKey pluck keys pick "
    "omit merge mergeOverwrite mustMerge mustMergeOverwrite values append mustAppend prepend mustPrepend first "
    "mustFirst rest mustRest last mustLast initial mustInitial reverse mustReverse uniq mustUniq without mustWithout "
    "has mustHas slice mustSlice concat dig chunk mustChunk bcrypt htpasswd genPrivateKey derivePassword "
    "buildCustomCert genCA genCAWithKey genSelfSignedCert genSelfSignedCertWithKey genSignedCert "
    "genSignedCertWithKey encryptAES decryptAES randBytes uuidv4 semver semverCompare fail regexMatch "
    "mustRegexMatch regexFindAll mustRegexFindAll regexFind mustRegexFind regexReplaceAll mustRegexReplaceAll "
    "regexReplaceAllLiteral mustRegexReplaceAllLiteral regexSplit mustRegexSplit regexQuoteMeta urlParse urlJoin"
)
# argo-cd@v3.5.1:applicationset/utils/utils.go init: the functions Argo CD adds
_ARGO = "normalize slugify toYaml fromYaml fromYamlArray"
ARGO_FUNCTIONS = frozenset(f"{_BUILTINS} {_SPRIG} {_ARGO}".split())
EMULATED_FUNCTIONS = ("index", "normalize", "lower", "upper", "trunc", "replace", "trimPrefix", "trimSuffix")


class TemplateError(ValueError):
    """The template fails in Argo CD too (a text/template parse or execution error)."""


class NotEmulated(TemplateError):
    """Argo CD would render it; this emulator does not, and says so instead of guessing."""


class StrMap(dict):
    """A Go ``map[string]string`` (the git generator's ``values``); a plain dict is ``map[string]any``."""


class Byte(int):
    """A Go ``uint8``: what ``index`` yields on a string."""


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NO_VALUE = _Sentinel("<no value>")  # an invalid reflect.Value (a missing map key under missingkey=default)
NIL = _Sentinel("nil")  # a nil interface{} (the zero value of map[string]any's element type)
_MISSING = _Sentinel("missing")  # no final argument from a previous pipeline stage


def sanitize_name(name: str) -> str:
    """Argo CD's ``normalize`` (argo-cd@v3.5.1:applicationset/utils/template_functions.go SanitizeName):
    strings.ToLower, every rune outside ``[-a-z0-9.]`` to '-', the first 253 bytes, '-' and '.'
    trimmed at both ends. Go's per-rune lower case maps only U+0130 and U+212A (Kelvin) from outside
    ASCII into it (unicode.ToLower); every other non-ASCII rune becomes one '-'."""
    out = []
    for ch in name:
        if ch < "\x80":
            c = ch.lower()
            out.append(c if c == "-" or c == "." or "a" <= c <= "z" or "0" <= c <= "9" else "-")
        else:
            out.append({"\u0130": "i", "\u212a": "k"}.get(ch, "-"))
    return "".join(out)[:253].strip("-.")


def missingkey_option(options: Sequence[Any] | None) -> str:
    """The missingkey mode ``goTemplateOptions`` select: Go's Template.Option, applied in order
    (argo-cd@v3.5.1:applicationset/utils/utils.go Replace; text/template option.go setOption). Any
    other string, spacing included, makes Option panic, which fails the controller's reconcile."""
    mode = "default"
    for opt in options or ():
        if not isinstance(opt, str):
            raise TemplateError(f"goTemplateOptions: {opt!r} is not a string")
        key, sep, value = opt.partition("=")
        if sep and key == "missingkey" and value in ("default", "invalid", "zero", "error"):
            mode = "default" if value == "invalid" else value
            continue
        raise TemplateError(
            f"goTemplateOptions: {opt!r} is not an option of Go's text/template (Template.Option accepts "
            "missingkey=default, missingkey=invalid, missingkey=zero and missingkey=error, written exactly so); "
            "Argo CD's controller panics on it and generates no Application"
        )
    return mode


# ---------------------------------------------------------------------------------------------
# fasttemplate


def go_trim_space(s: str) -> str:
    return s.strip(GO_SPACE)


def _is_templated(s: str) -> bool:
    """utils.go isTemplatedRegex ``.*{{.*}}.*`` (RE2: '.' does not match a newline)."""
    for line in s.split("\n"):
        i = line.find("{{")
        if i >= 0 and line.find("}}", i + 2) >= 0:
            return True
    return False


def fasttemplate(template: str, params: dict[str, Any]) -> str:
    """Render.Replace without Go templates: fasttemplate's tags, each replaced by the string
    parameter its trimmed text names, else kept as ``{{tag}}``."""
    if not _is_templated(template):
        return template
    out: list[str] = []
    pos, size = 0, 0
    while True:
        start = template.find("{{", pos)
        if start < 0:
            out.append(template[pos:])
            break
        out.append(template[pos:start])
        end = template.find("}}", start + 2)
        if end < 0:  # fasttemplate.go Reset
            raise TemplateError(f"invalid template: cannot find end tag '}}}}' after {_excerpt(template[start:])}")
        tag = template[start + 2 : end]
        key = go_trim_space(tag)
        value = params.get(key)
        out.append(value if key and isinstance(value, str) else "{{" + tag + "}}")
        size += len(out[-1]) + len(out[-2])
        if size > MAX_OUTPUT:
            raise TemplateError(f"renders longer than {MAX_OUTPUT} characters, more than kube-apiserver stores")
        pos = end + 2
    return "".join(out)


def _excerpt(s: str, limit: int = 60) -> str:
    return repr(s if len(s) <= limit else s[:limit] + "...")


# ---------------------------------------------------------------------------------------------
# text/template: lexer (parse/lex.go)

# token kinds
_T_SPACE, _T_DOT, _T_FIELD, _T_VAR, _T_IDENT, _T_KEYWORD, _T_BOOL, _T_NIL = range(8)
_T_NUMBER, _T_CHARCONST, _T_COMPLEX, _T_STRING, _T_PIPE, _T_LPAREN, _T_RPAREN = range(8, 15)
_T_ASSIGN, _T_DECLARE, _T_CHAR, _T_END = range(15, 19)


@dataclass(slots=True)
class _Tok:
    kind: int
    text: str
    value: Any = None


def _alnum(c: str) -> bool:
    return c == "_" or c.isalpha() or unicodedata.category(c) == "Nd"  # lex.go isAlphaNumeric


class _Lexer:
    def __init__(self, s: str) -> None:
        self.s = s
        self.n = len(s)

    def _right_delim(self, p: int) -> tuple[bool, bool]:
        s = self.s
        if p + 1 < self.n and s[p] in _SPACE and s[p + 1] == "-" and s.startswith("}}", p + 2):
            return True, True
        return s.startswith("}}", p), False

    def _terminator(self, p: int) -> bool:
        if p >= self.n:
            return True
        c = self.s[p]
        return c in _SPACE or c in ".,|:)(" or self.s.startswith("}}", p)

    def _alnum_run(self, p: int) -> int:
        while p < self.n and _alnum(self.s[p]):
            p += 1
        return p

    def action(self, p: int) -> tuple[list[_Tok], int, bool]:
        """The tokens of the action starting at ``p`` (after ``{{`` and its trim marker): the tokens,
        the position after ``}}``, whether ``-}}`` trims the following text."""
        s, n = self.s, self.n
        toks: list[_Tok] = []
        depth = 0
        while True:
            delim, trim = self._right_delim(p)
            if delim:
                if depth:
                    raise TemplateError("unclosed left paren")
                toks.append(_Tok(_T_END, "}}"))
                return toks, p + (4 if trim else 2), trim
            if p >= n:
                raise TemplateError("unclosed action")
            c = s[p]
            if c in _SPACE:
                q = p
                while q < n and s[q] in _SPACE:
                    q += 1
                if s.startswith("-}}", q) and q - p >= 1:  # lexSpace: a trim-marked closing delimiter
                    if q - p > 1:
                        toks.append(_Tok(_T_SPACE, " "))
                    p = q - 1
                    continue
                toks.append(_Tok(_T_SPACE, " "))
                p = q
            elif c == "=":
                toks.append(_Tok(_T_ASSIGN, "="))
                p += 1
            elif c == ":":
                if not s.startswith(":=", p):
                    raise TemplateError("expected :=")
                toks.append(_Tok(_T_DECLARE, ":="))
                p += 2
            elif c == "|":
                toks.append(_Tok(_T_PIPE, "|"))
                p += 1
            elif c == '"':
                p = self._quote(p, toks)
            elif c == "`":
                q = s.find("`", p + 1)
                if q < 0:
                    raise TemplateError("unterminated raw quoted string")
                toks.append(_Tok(_T_STRING, s[p : q + 1], s[p + 1 : q].replace("\r", "")))  # strconv.Unquote
                p = q + 1
            elif c == "'":
                q = p + 1
                while True:  # lexChar
                    if q >= n or s[q] == "\n":
                        raise TemplateError("unterminated character constant")
                    if s[q] == "\\":
                        if q + 1 >= n or s[q + 1] == "\n":
                            raise TemplateError("unterminated character constant")
                        q += 2
                        continue
                    if s[q] == "'":
                        break
                    q += 1
                toks.append(_Tok(_T_CHARCONST, s[p : q + 1]))
                p = q + 1
            elif c == "$":
                q = p + 1 if self._terminator(p + 1) else self._alnum_run(p + 1)
                if not self._terminator(q):
                    raise TemplateError(f"bad character {s[q]!r}")
                toks.append(_Tok(_T_VAR, s[p:q]))
                p = q
            elif c == "." and not (p + 1 < n and "0" <= s[p + 1] <= "9"):
                if self._terminator(p + 1):
                    toks.append(_Tok(_T_DOT, "."))
                    p += 1
                    continue
                q = self._alnum_run(p + 1)
                if not self._terminator(q):
                    raise TemplateError(f"bad character {s[q]!r}")
                toks.append(_Tok(_T_FIELD, s[p:q]))
                p = q
            elif c in "+-." or "0" <= c <= "9":
                p = self._number(p, toks)
            elif _alnum(c):
                q = self._alnum_run(p)
                if not self._terminator(q):
                    raise TemplateError(f"bad character {s[q]!r}")
                word = s[p:q]
                if word in _KEYWORDS:
                    toks.append(_Tok(_T_KEYWORD, word))
                elif word == "nil":
                    toks.append(_Tok(_T_NIL, word))
                elif word in ("true", "false"):
                    toks.append(_Tok(_T_BOOL, word, word == "true"))
                else:
                    toks.append(_Tok(_T_IDENT, word))
                p = q
            elif c == "(":
                depth += 1
                toks.append(_Tok(_T_LPAREN, "("))
                p += 1
            elif c == ")":
                depth -= 1
                if depth < 0:
                    raise TemplateError("unexpected right paren")
                toks.append(_Tok(_T_RPAREN, ")"))
                p += 1
            elif " " <= c <= "~":
                toks.append(_Tok(_T_CHAR, c))
                p += 1
            else:
                raise TemplateError(f"unrecognized character in action: U+{ord(c):04X}")

    def _quote(self, p: int, toks: list[_Tok]) -> int:
        s, n = self.s, self.n
        q = p + 1
        while True:  # lexQuote
            if q >= n or s[q] == "\n":
                raise TemplateError("unterminated quoted string")
            if s[q] == "\\":
                if q + 1 >= n or s[q + 1] == "\n":
                    raise TemplateError("unterminated quoted string")
                q += 2
                continue
            if s[q] == '"':
                break
            q += 1
        toks.append(_Tok(_T_STRING, s[p : q + 1], _unquote(s[p + 1 : q])))
        return q + 1

    def _accept(self, p: int, chars: str) -> int:
        return p + 1 if p < self.n and self.s[p] in chars else p

    def _accept_run(self, p: int, chars: str) -> int:
        while p < self.n and self.s[p] in chars:
            p += 1
        return p

    def _scan_number(self, p: int) -> tuple[int, bool]:
        """lex.go scanNumber: the end of the number at ``p`` and whether it is well formed."""
        p = self._accept(p, "+-")
        digits = "0123456789_"
        q = self._accept(p, "0")
        if q > p:
            p = q
            for marks, ds in (("xX", "0123456789abcdefABCDEF_"), ("oO", "01234567_"), ("bB", "01_")):
                q = self._accept(p, marks)
                if q > p:
                    p, digits = q, ds
                    break
        p = self._accept_run(p, digits)
        q = self._accept(p, ".")
        if q > p:
            p = self._accept_run(q, digits)
        if len(digits) == 11:
            q = self._accept(p, "eE")
            if q > p:
                p = self._accept_run(self._accept(q, "+-"), "0123456789_")
        if len(digits) == 23:
            q = self._accept(p, "pP")
            if q > p:
                p = self._accept_run(self._accept(q, "+-"), "0123456789_")
        p = self._accept(p, "i")
        if p < self.n and _alnum(self.s[p]):
            return p + 1, False
        return p, True

    def _number(self, p: int, toks: list[_Tok]) -> int:
        q, ok = self._scan_number(p)
        if not ok:
            raise TemplateError(f"bad number syntax: {self.s[p:q]!r}")
        if q < self.n and self.s[q] in "+-":  # lexNumber: a complex constant
            r, ok = self._scan_number(q)
            if not ok or self.s[r - 1] != "i":
                raise TemplateError(f"bad number syntax: {self.s[p:r]!r}")
            toks.append(_Tok(_T_COMPLEX, self.s[p:r]))
            return r
        toks.append(_Tok(_T_NUMBER, self.s[p:q]))
        return q


_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


def _unquote(body: str) -> str:
    """strconv.Unquote of a double-quoted Go string (the lexer has checked its end)."""
    if "\\" not in body:
        return body
    out, i, n = [], 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        i += 2
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
        elif e in "xuU" or "0" <= e <= "7":
            width = {"x": 2, "u": 4, "U": 8}.get(e, 2)
            digits = body[i : i + width] if e in "xuU" else e + body[i : i + width]
            base = 8 if e not in "xuU" else 16
            if len(digits) != (width if e in "xuU" else 3) or not all(
                ch in ("01234567" if base == 8 else "0123456789abcdefABCDEF") for ch in digits
            ):
                raise TemplateError(f"invalid escape in string {_excerpt(body)}")
            i += width
            v = int(digits, base)
            if e in "uU":
                if v > 0x10FFFF or 0xD800 <= v <= 0xDFFF:
                    raise TemplateError(f"invalid escape in string {_excerpt(body)}")
            elif v > 255:
                raise TemplateError(f"invalid escape in string {_excerpt(body)}")
            elif v >= 0x80:
                raise NotEmulated(
                    f"the byte escape \\{e}{body[i - width : i]} in a Go string (a raw byte, not a character) is not "
                    "emulated by trainyard render"
                )
            out.append(chr(v))
        else:  # \' and anything else: strconv.ErrSyntax
            raise TemplateError(f"invalid escape \\{e} in string {_excerpt(body)}")
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# text/template: parser (parse/parse.go), for the emulated subset


@dataclass(slots=True)
class _Field:
    names: tuple[str, ...]


@dataclass(slots=True)
class _Var:  # $ and $.a.b: the only variable without a declaration
    names: tuple[str, ...]


@dataclass(slots=True)
class _Dot:
    pass


@dataclass(slots=True)
class _Const:
    value: Any  # str, int or bool


@dataclass(slots=True)
class _Nil:
    pass


@dataclass(slots=True)
class _Ident:
    name: str


@dataclass(slots=True)
class _Pipe:
    cmds: list[list[Any]]


_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]{0,17})")


class _Parser:
    def __init__(self, toks: list[_Tok]) -> None:
        self.toks = toks
        self.i = 0
        self.depth = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def peek_non_space(self) -> _Tok:
        while self.toks[self.i].kind == _T_SPACE:
            self.i += 1
        return self.toks[self.i]

    def next_non_space(self) -> _Tok:
        t = self.peek_non_space()
        self.i += 1
        return t

    def action(self) -> _Pipe:
        t = self.peek_non_space()
        if t.kind == _T_KEYWORD:
            raise NotEmulated(f"the Go template action {{{{{t.text}}}}} is not emulated by trainyard render")
        return self.pipeline("command", _T_END)

    def pipeline(self, context: str, end: int) -> _Pipe:
        v = self.peek_non_space()
        if v.kind == _T_VAR:
            j = self.i + 1
            while self.toks[j].kind == _T_SPACE:
                j += 1
            after = self.toks[j]
            if after.kind in (_T_ASSIGN, _T_DECLARE) or (after.kind == _T_CHAR and after.text == ","):
                raise NotEmulated(
                    f"Go template variables ({v.text} {after.text} ...) are not emulated by trainyard render"
                )
        pipe = _Pipe([])
        while True:
            t = self.next_non_space()
            if t.kind == end:
                if not pipe.cmds:
                    raise TemplateError(f"missing value for {context}")
                for stage, cmd in enumerate(pipe.cmds[1:], start=2):
                    if isinstance(cmd[0], _Const | _Dot | _Nil):
                        raise TemplateError(f"non executable command in pipeline stage {stage}")
                return pipe
            if t.kind in (_T_BOOL, _T_CHARCONST, _T_COMPLEX, _T_DOT, _T_FIELD, _T_IDENT, _T_NUMBER, _T_NIL,
                          _T_STRING, _T_VAR, _T_LPAREN):  # fmt: skip
                self.i -= 1
                pipe.cmds.append(self.command())
            else:
                raise TemplateError(f"unexpected {t.text!r} in {context}")

    def command(self) -> list[Any]:
        args: list[Any] = []
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                args.append(operand)
            t = self.next()
            if t.kind == _T_SPACE:
                continue
            if t.kind in (_T_END, _T_RPAREN):
                self.i -= 1
            elif t.kind != _T_PIPE:
                raise TemplateError(f"unexpected {t.text!r} in operand")
            break
        if not args:
            raise TemplateError("empty command")
        return args

    def operand(self) -> Any:
        node = self.term()
        if node is None or self.peek().kind != _T_FIELD:
            return node
        fields = []
        while self.peek().kind == _T_FIELD:
            fields.append(self.next().text[1:])
        if isinstance(node, _Field):
            return _Field(node.names + tuple(fields))
        if isinstance(node, _Var):
            return _Var(node.names + tuple(fields))
        if isinstance(node, _Const | _Nil | _Dot):
            raise TemplateError(f"unexpected . after term {node!r}")
        raise NotEmulated(
            "a field of a function's or a parenthesised pipeline's result ((...).field) is not emulated by trainyard "
            "render; use index"
        )

    def term(self) -> Any:
        t = self.next_non_space()
        k = t.kind
        if k == _T_IDENT:
            if t.text not in ARGO_FUNCTIONS:
                raise TemplateError(f'function "{t.text}" not defined (not in Argo CD\'s Go template functions)')
            if t.text not in EMULATED_FUNCTIONS:
                raise NotEmulated(
                    f"Go template function {t.text} is not emulated by trainyard render; Argo CD has it "
                    "(Sprig or its own, argo-cd@v3.5.1:applicationset/utils/utils.go), trainyard follows only "
                    f"{', '.join(EMULATED_FUNCTIONS)}"
                )
            return _Ident(t.text)
        if k == _T_DOT:
            return _Dot()
        if k == _T_NIL:
            return _Nil()
        if k == _T_VAR:
            if t.text != "$":
                raise TemplateError(f'undefined variable "{t.text}"')
            return _Var(("$",))
        if k == _T_FIELD:
            return _Field(tuple(t.text[1:].split(".")))
        if k == _T_BOOL:
            return _Const(t.value)
        if k == _T_NUMBER:
            if _INT.fullmatch(t.text):
                return _Const(int(t.text))
            if not any(ch.isdigit() for ch in t.text):
                raise TemplateError(f"illegal number syntax: {t.text!r}")
            raise NotEmulated(
                f"the Go number constant {t.text} is not emulated by trainyard render (decimal integers are)"
            )
        if k in (_T_CHARCONST, _T_COMPLEX):
            raise NotEmulated(f"the Go constant {t.text} is not emulated by trainyard render")
        if k == _T_LPAREN:
            if self.depth >= MAX_PAREN_DEPTH:
                raise NotEmulated(f"parentheses nested deeper than {MAX_PAREN_DEPTH} are not emulated")
            self.depth += 1
            pipe = self.pipeline("parenthesized pipeline", _T_RPAREN)
            self.depth -= 1
            return pipe
        if k == _T_STRING:
            return _Const(t.value)
        self.i -= 1
        return None


def _check_names(node: Any) -> None:
    names = node.names[1:] if isinstance(node, _Var) else node.names
    for name in names:
        if not name.isascii():
            raise NotEmulated(f"the non-ASCII field name {name!r} is not emulated by trainyard render")


def parse(template: str) -> list[str | _Pipe]:
    """The text and actions of a template, as text/template's parser reads them (errors included)."""
    lexer = _Lexer(template)
    out: list[str | _Pipe] = []
    pos, n = 0, len(template)
    while pos < n:
        start = template.find("{{", pos)
        if start < 0:
            out.append(template[pos:])
            break
        inner = start + 2
        trim_left = inner + 1 < n and template[inner] == "-" and template[inner + 1] in _SPACE
        text = template[pos:start]
        out.append(text.rstrip(_SPACE) if trim_left else text)
        inner += 2 if trim_left else 0
        if template.startswith("/*", inner):  # lexComment
            close = template.find("*/", inner + 2)
            if close < 0:
                raise TemplateError("unclosed comment")
            delim, trim = lexer._right_delim(close + 2)
            if not delim:
                raise TemplateError("comment ends before closing delimiter")
            pos = close + 2 + (4 if trim else 2)
        else:
            toks, pos, trim = lexer.action(inner)
            parser = _Parser(toks)
            pipe = parser.action()
            _walk_check(pipe)
            out.append(pipe)
        if trim:  # -}} trims the leading spaces of the text after it
            while pos < n and template[pos] in _SPACE:
                pos += 1
    return out


def _walk_check(pipe: _Pipe) -> None:
    stack = [pipe]
    while stack:
        p = stack.pop()
        for cmd in p.cmds:
            for node in cmd:
                if isinstance(node, _Pipe):
                    stack.append(node)
                elif isinstance(node, _Field | _Var):
                    _check_names(node)


# ---------------------------------------------------------------------------------------------
# text/template: execution (exec.go, funcs.go) on map parameters

_STR, _INTT, _ANY = "string", "int", "reflect.Value"


def _go_type(v: Any) -> str:
    if isinstance(v, StrMap):
        return "map[string]string"
    if isinstance(v, dict):
        return "map[string]interface {}"
    if isinstance(v, list):
        return "[]string"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, Byte):
        return "uint8"
    if isinstance(v, int):
        return "int"
    if isinstance(v, str):
        return "string"
    return "interface {}"


def _text(v: Any) -> str:
    """fmt.Fprint of a value, as text/template prints it (maps with sorted keys)."""
    if v is NO_VALUE:
        return "<no value>"
    if v is NIL:
        return "<nil>"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, list):
        return "[" + " ".join(_text(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{_text(v[k])}" for k in sorted(v)) + "]"
    if v is None:
        return "<nil>"
    raise NotEmulated(f"printing a parameter of type {type(v).__name__} is not emulated by trainyard render")


def _trunc(c: int, s: str) -> str:
    b = s.encode("utf-8")
    if c < 0 and len(b) + c > 0:
        b = b[len(b) + c :]
    elif c >= 0 and len(b) > c:
        b = b[:c]
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise NotEmulated(
            f"trunc {c} would cut a multi-byte character of {_excerpt(s)} (Go slices bytes); not emulated"
        ) from None


def _ascii_case(name: str, f: Callable[[str], str]) -> Callable[[str], str]:
    def apply(s: str) -> str:
        if not s.isascii():  # Go's unicode tables and Python's full case mapping differ outside ASCII
            raise NotEmulated(f"{name} of the non-ASCII string {_excerpt(s)} is not emulated by trainyard render")
        return f(s)

    return apply


# name -> (parameter types, function); Sprig v3.3.0 functions.go and strings.go
_FUNCS: dict[str, tuple[tuple[str, ...], Callable[..., Any]]] = {
    "normalize": ((_STR,), sanitize_name),
    "lower": ((_STR,), _ascii_case("lower", str.lower)),
    "upper": ((_STR,), _ascii_case("upper", str.upper)),
    "trunc": ((_INTT, _STR), _trunc),
    "replace": ((_STR, _STR, _STR), lambda old, new, src: src.replace(old, new)),
    "trimPrefix": ((_STR, _STR), lambda a, b: b.removeprefix(a)),
    "trimSuffix": ((_STR, _STR), lambda a, b: b.removesuffix(a)),
}


class _Exec:
    def __init__(self, data: dict, mode: str) -> None:
        self.data = data
        self.mode = mode

    def pipeline(self, pipe: _Pipe, dot: Any) -> Any:
        value: Any = _MISSING
        for cmd in pipe.cmds:
            value = self.command(cmd, dot, value)
            if value is NIL:  # evalPipeline: an interface{} is dug into; a nil one is no value
                value = NO_VALUE
        return value

    def not_a_function(self, cmd: list[Any], final: Any) -> None:
        if len(cmd) > 1 or final is not _MISSING:
            raise TemplateError("can't give argument to non-function")

    def command(self, cmd: list[Any], dot: Any, final: Any) -> Any:
        head = cmd[0]
        if isinstance(head, _Field):
            return self.chain(dot, head.names, len(cmd) > 1 or final is not _MISSING)
        if isinstance(head, _Var):
            if len(head.names) == 1:
                self.not_a_function(cmd, final)
                return self.data
            return self.chain(self.data, head.names[1:], len(cmd) > 1 or final is not _MISSING)
        if isinstance(head, _Ident):
            return self.call(head.name, cmd[1:], dot, final)
        self.not_a_function(cmd, final)
        if isinstance(head, _Pipe):
            return self.pipeline(head, dot)
        if isinstance(head, _Dot):
            return dot
        if isinstance(head, _Nil):
            raise TemplateError("nil is not a command")
        return head.value

    def chain(self, receiver: Any, names: tuple[str, ...], has_args: bool) -> Any:
        for name in names[:-1]:
            receiver = self.field(receiver, name, False)
        return self.field(receiver, names[-1], has_args)

    def field(self, receiver: Any, name: str, has_args: bool) -> Any:
        if receiver is NO_VALUE:
            if self.mode == "error":
                raise TemplateError(f"nil data; no entry for key {name!r}")
            return NO_VALUE
        if receiver is NIL:
            raise TemplateError(f"nil pointer evaluating interface {{}}.{name}")
        if isinstance(receiver, dict):
            if has_args:
                raise TemplateError(f"{name} is not a method but has arguments")
            if name in receiver:
                value = receiver[name]
                return NIL if value is None else value
            if self.mode == "error":
                raise TemplateError(f"map has no entry for key {name!r}")
            if self.mode == "zero":
                return "" if isinstance(receiver, StrMap) else NIL
            return NO_VALUE
        raise TemplateError(f"can't evaluate field {name} in type {_go_type(receiver)}")

    def arg(self, typ: str, node: Any, dot: Any) -> Any:
        if isinstance(node, _Dot):
            return self.validate(dot, typ)
        if isinstance(node, _Nil):
            if typ == _ANY:
                return NO_VALUE
            raise TemplateError(f"cannot assign nil to {typ}")
        if isinstance(node, _Field):
            return self.validate(self.chain(dot, node.names, False), typ)
        if isinstance(node, _Var):
            value = self.data if len(node.names) == 1 else self.chain(self.data, node.names[1:], False)
            return self.validate(value, typ)
        if isinstance(node, _Pipe):
            return self.validate(self.pipeline(node, dot), typ)
        if isinstance(node, _Ident):
            return self.validate(self.call(node.name, [], dot, _MISSING), typ)
        value = node.value  # a constant
        if typ == _ANY:
            return value
        if typ == _STR and isinstance(value, str):
            return value
        if typ == _INTT and type(value) is int:
            return value
        raise TemplateError(f"expected {'string' if typ == _STR else 'integer'}; found {_text(value)}")

    def validate(self, value: Any, typ: str) -> Any:
        if typ == _ANY:
            return value
        if value is NO_VALUE:
            raise TemplateError(f"invalid value; expected {typ}")
        if (typ == _STR and isinstance(value, str)) or (typ == _INTT and type(value) is int):
            return value
        raise TemplateError(f"wrong type for value; expected {typ}; got {_go_type(value)}")

    def call(self, name: str, args: list[Any], dot: Any, final: Any) -> Any:
        n_in = len(args) + (final is not _MISSING)
        if name == "index":
            if n_in < 1:
                raise TemplateError("wrong number of args for index: want at least 1 got 0")
            argv = [self.arg(_ANY, a, dot) for a in args]
            if final is not _MISSING:
                argv.append(final)
            return _index(argv[0], argv[1:])
        types, fn = _FUNCS[name]
        if n_in != len(types):
            raise TemplateError(f"wrong number of args for {name}: want {len(types)} got {n_in}")
        argv = [self.arg(t, a, dot) for t, a in zip(types, args, strict=False)]
        if final is not _MISSING:
            argv.append(self.validate(final, types[-1]))
        result = fn(*argv)
        if len(result) > MAX_OUTPUT:
            raise TemplateError(f"{name} renders longer than {MAX_OUTPUT} characters, more than kube-apiserver stores")
        return result


def _index(item: Any, indexes: list[Any]) -> Any:
    """text/template funcs.go index."""
    if item is NO_VALUE or item is NIL:
        raise TemplateError("error calling index: index of untyped nil")
    for idx in indexes:
        if item is NIL:
            raise TemplateError("error calling index: index of nil pointer")
        if idx is NIL:
            idx = NO_VALUE
        if isinstance(item, str | list):
            if idx is NO_VALUE:
                raise TemplateError("error calling index: cannot index slice/array with nil")
            if type(idx) is not int and type(idx) is not Byte:
                raise TemplateError(f"error calling index: cannot index slice/array with type {_go_type(idx)}")
            seq = item.encode("utf-8") if isinstance(item, str) else item
            x = int(idx)
            if x < 0 or x >= len(seq):  # > len: indexArg; == len: reflect's panic, returned as an error
                raise TemplateError(f"error calling index: index out of range: {x}")
            item = Byte(seq[x]) if isinstance(item, str) else seq[x]
        elif isinstance(item, dict):
            if idx is NO_VALUE:
                raise TemplateError("error calling index: value is nil; should be of type string")
            if not isinstance(idx, str):
                raise TemplateError(f"error calling index: value has type {_go_type(idx)}; should be string")
            item = item[idx] if idx in item else ("" if isinstance(item, StrMap) else NIL)
            item = NIL if item is None else item
        else:
            raise TemplateError(f"error calling index: can't index item of type {_go_type(item)}")
    return item


def render(template: str, params: dict, missingkey: str = "default") -> str:
    """One string through text/template as Render.Replace runs it with ``goTemplate: true``:
    parsed whole first (any error fails it), then executed on ``params`` (a ``map[string]any``)."""
    if "{{" not in template:  # nothing but text
        return template
    nodes = parse(template)
    run = _Exec(params, missingkey)
    out: list[str] = []
    size = 0
    for node in nodes:
        piece = node if isinstance(node, str) else _text(run.pipeline(node, params))
        size += len(piece)
        if size > MAX_OUTPUT:
            raise TemplateError(f"renders longer than {MAX_OUTPUT} characters, more than kube-apiserver stores")
        out.append(piece)
    return "".join(out)
