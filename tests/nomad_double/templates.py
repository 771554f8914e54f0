"""Runtime interpolation (``${...}``) and the small ``template`` subset the double renders.

Interpolation, as Nomad does it in ``command``, ``args``, ``env`` and template ``DestPath``:
``${NOMAD_*}`` and any other task environment variable, ``${env["X"]}``, ``${node.unique.id}``,
``${node.unique.name}``, ``${node.datacenter}``, ``${node.region}``, ``${node.class}``,
``${node.pool}``, ``${attr.<name>}`` (a few fixed attributes) and ``${meta.<key>}`` (the
*node's* meta, as in Nomad: job/group/task meta reach a task as ``NOMAD_META_<key>``).
An unknown ``${...}`` is left as written, as Nomad leaves it.

Templates (consul-template syntax, the subset that jobs handing credentials to tasks use):
``{{ with nomadVar "path" }}...{{ .KEY }}...{{ end }}``,
``{{ range $k, $v := nomadVar "path" }}{{ $k }}={{ $v }}{{ end }}``,
``{{ range nomadVar "path" }}{{ .Key }}={{ .Value }}{{ end }}``,
``{{ with nomadVar "path" }}{{ range $k, $v := . }}...{{ end }}{{ end }}``,
``{{ env "NAME" }}`` and trim markers ``{{-`` / ``-}}``. Anything else raises
:class:`TemplateError` (the task then fails with a "Template failed" event, so an
unsupported construct is loud, never silently rendered wrong).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

_INTERP = re.compile(r"\$\{([^}]+)\}")


def interpolate(text: str, env: Mapping[str, str], node: Mapping[str, str]) -> str:
    """Replace ``${...}`` as Nomad's taskenv does; unknown names stay untouched."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        env_index = re.fullmatch(r'env\["([^"]+)"\]', name)
        if env_index:
            name = env_index.group(1)
        if name in node:
            return node[name]
        if name in env:
            return env[name]
        return match.group(0)

    return _INTERP.sub(one, text)


class TemplateError(Exception):
    """A template the double cannot render (unsupported syntax or a denied variable)."""


class MissingVariableError(Exception):
    """A ``nomadVar`` path that does not exist yet: Nomad blocks the task until it does."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


# ---------------------------------------------------------------------------------------
# A tiny parser for the supported subset: text, {{ action }}, with/range ... end blocks.

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


@dataclass
class _Node:
    kind: str  # "text" | "expr" | "with" | "range"
    arg: str = ""
    key_var: str = ""
    value_var: str = ""
    body: list[_Node] = field(default_factory=list)


def _tokens(source: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    for match in _ACTION.finditer(source):
        text = source[pos : match.start()]
        if match.group(1):
            text = text.rstrip()
        if out and out[-1][0] == "trim-next":
            out.pop()
            text = text.lstrip()
        out.append(("text", text))
        out.append(("action", match.group(2)))
        if match.group(3):
            out.append(("trim-next", ""))
        pos = match.end()
    tail = source[pos:]
    if out and out[-1][0] == "trim-next":
        out.pop()
        tail = tail.lstrip()
    out.append(("text", tail))
    return out


_RANGE_KV = re.compile(r"range\s+\$(\w+)\s*,\s*\$(\w+)\s*:=\s*(.+)")


def _parse(source: str) -> list[_Node]:
    root: list[_Node] = []
    stack: list[list[_Node]] = [root]
    for kind, value in _tokens(source):
        if kind == "text":
            if value:
                stack[-1].append(_Node("text", value))
            continue
        if value.startswith("/*"):
            continue
        if value == "end":
            if len(stack) == 1:
                raise TemplateError("unexpected {{ end }}")
            stack.pop()
            continue
        if value.startswith("with "):
            node = _Node("with", value[5:].strip())
        elif kv := _RANGE_KV.fullmatch(value):
            node = _Node("range", kv.group(3).strip(), kv.group(1), kv.group(2))
        elif value.startswith("range "):
            node = _Node("range", value[6:].strip())
        else:
            stack[-1].append(_Node("expr", value))
            continue
        stack[-1].append(node)
        stack.append(node.body)
    if len(stack) != 1:
        raise TemplateError("missing {{ end }}")
    return root


@dataclass
class _Item:
    Key: str
    Value: str


Lookup = Callable[[str], Mapping[str, str]]


def render(source: str, lookup: Lookup, env: Mapping[str, str]) -> str:
    """Render ``source``; ``lookup(path)`` gives a variable's items or raises
    MissingVariableError."""
    return _render(_parse(source), lookup, env, dot=None, scope={})


def _value(
    expr: str, lookup: Lookup, env: Mapping[str, str], dot: object, scope: dict[str, object]
) -> object:
    expr = expr.strip()
    if expr.startswith("(") and expr.endswith(")"):
        expr = expr[1:-1].strip()
    var = re.fullmatch(r'nomadVar\s+"([^"]+)"', expr)
    if var:
        return dict(lookup(var.group(1)))
    env_call = re.fullmatch(r'env\s+"([^"]+)"', expr)
    if env_call:
        return env.get(env_call.group(1), "")
    if expr == ".":
        return dot
    if re.fullmatch(r"\$\w+", expr):
        if expr[1:] not in scope:
            raise TemplateError(f"undefined variable {expr}")
        return scope[expr[1:]]
    field_ref = re.fullmatch(r"\.(\w+)", expr)
    if field_ref:
        name = field_ref.group(1)
        if isinstance(dot, dict):
            if name not in dot:
                raise TemplateError(f"no key {name!r} in the variable")
            return dot[name]
        if isinstance(dot, _Item):
            return getattr(dot, name)
        raise TemplateError(f"cannot read .{name} here")
    raise TemplateError(f"unsupported template action {{{{ {expr} }}}}")


def _render(
    nodes: list[_Node],
    lookup: Lookup,
    env: Mapping[str, str],
    dot: object,
    scope: dict[str, object],
) -> str:
    out: list[str] = []
    for node in nodes:
        if node.kind == "text":
            out.append(node.arg)
        elif node.kind == "expr":
            out.append(str(_value(node.arg, lookup, env, dot, scope)))
        elif node.kind == "with":
            value = _value(node.arg, lookup, env, dot, scope)
            if value:
                out.append(_render(node.body, lookup, env, value, scope))
        else:
            value = _value(node.arg, lookup, env, dot, scope)
            if not isinstance(value, dict):
                raise TemplateError("range over something that is not a variable")
            for key in sorted(value):
                inner = dict(scope)
                if node.key_var:
                    inner[node.key_var] = key
                    inner[node.value_var] = value[key]
                out.append(_render(node.body, lookup, env, _Item(key, value[key]), inner))
    return "".join(out)


def parse_env_file(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines, as Nomad reads a template with ``env = true``."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, sep, value = line.partition("=")
        if not sep:
            raise TemplateError(f"env template line without '=': {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out
