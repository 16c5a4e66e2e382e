"""Argo CD's custom health checks (argocd-cm ``resource.customizations.health.<group>_<kind>``),
run with a real Lua runtime (lupa) the way Argo CD runs them: the live object in the global
``obj``, the script's result read as hs.status and hs.message.

Argo CD runs health scripts in gopher-lua, a Lua 5.1, with only the base, table and package
libraries and a reduced os (argoproj/argo-cd@v3.6.2:util/lua/lua.go, unless useOpenLibs is set for
the kind), so the scripts run here in Lua 5.1 with string, math, io, debug and coroutine removed
and no string methods: a script that relies on them fails here as it would in Argo CD.
"""

from __future__ import annotations

from lupa.lua51 import LuaRuntime

HEALTH_PREFIX = "resource.customizations.health."
SANDBOX = """
string, math, io, debug, coroutine, utf8 = nil, nil, nil, nil, nil, nil
local clock, date, difftime, time = os.clock, os.date, os.difftime, os.time
os = {clock = clock, date = date, difftime = difftime, time = time}
getmetatable("").__index = nil
"""


def key(api_version: str, kind: str) -> str:
    """The argocd-cm key of ``kind``'s health check (the group, without the version)."""
    group = api_version.rpartition("/")[0]
    return f"{HEALTH_PREFIX}{group}_{kind}"


def run_health(script: str, obj: dict) -> dict:
    """``{"status": ..., "message": ...}`` of ``script`` on ``obj``."""
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.execute(SANDBOX)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(script)
    return {"status": result["status"], "message": result["message"]}


def health(argocd_cm: dict[str, str], obj: dict) -> dict | None:
    """The health argocd-cm's data gives ``obj``; None where it has no check for the kind."""
    script = argocd_cm.get(key(obj.get("apiVersion", ""), obj.get("kind", "")))
    return run_health(script, obj) if script else None
