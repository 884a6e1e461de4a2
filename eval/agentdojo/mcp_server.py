"""One AgentDojo suite as an MCP server on stdio (the upstream behind the gateway).

Tools are AgentDojo's own functions, with their own JSON schemas; calls run through AgentDojo's
``FunctionsRuntime`` against one environment object held in this process. Results are returned as
``structuredContent = {"result": <JSON>}`` plus the same JSON as text. No annotations are sent:
the gateway's operator configuration says which tools read and which have effects.

The environment is set and inspected over a **control socket** (a Unix socket in a private
directory, path given by ``--control``), used only by the trusted harness: ``set_env`` installs a
fresh environment before a run, ``get_env`` returns it for scoring (both pickled: AgentDojo's
models rebuild some state from their initial data when validated from JSON, so JSON would lose
what a run changed; the socket is private to the trusted harness), ``last`` returns the raw
result of the last call (the harness uses it to tell the simulated runtime which handle stands
where). The runtime only ever talks MCP to the gateway and cannot reach this socket.
"""

from __future__ import annotations

import argparse
import base64
import asyncio
import datetime
import enum
import json
import os
import pickle
import sys

import suites
from agentdojo.functions_runtime import FunctionsRuntime
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from pydantic import BaseModel


def jsonable(value):
    """AgentDojo return values (Pydantic models, lists, dicts, dates, enums) as plain JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class SuiteServer:
    def __init__(self, suite_name: str):
        self.suite = suites.load(suite_name)
        self.runtime = FunctionsRuntime(self.suite.tools)
        self.env_type = type(self.suite.load_and_inject_default_environment({}))
        self.env = self.suite.load_and_inject_default_environment({})
        self.last = None

    def tools(self) -> list[types.Tool]:
        return [
            types.Tool(name=f.name, description=f.description, inputSchema=f.parameters.model_json_schema())
            for f in self.suite.tools
        ]

    def call(self, name: str, arguments: dict) -> types.CallToolResult:
        result, error = self.runtime.run_function(self.env, name, arguments or {}, raise_on_error=False)
        if error is not None:
            self.last = {"error": error}
            return types.CallToolResult(content=[types.TextContent(type="text", text=error)], isError=True)
        structured = {"result": jsonable(result)}
        self.last = {"result": structured}
        text = json.dumps(structured, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structuredContent=structured, isError=False
        )

    def control(self, request: dict) -> dict:
        op = request.get("op")
        if op == "set_env":
            self.env = pickle.loads(base64.b64decode(request["env"]))
            self.last = None
            return {"ok": True}
        if op == "get_env":
            return {"ok": True, "env": base64.b64encode(pickle.dumps(self.env)).decode()}
        if op == "last":
            return {"ok": True, "last": self.last}
        return {"ok": False, "error": f"unknown op {op!r}"}


async def serve_control(state: SuiteServer, path: str):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while line := await reader.readline():
                try:
                    answer = state.control(json.loads(line))
                except Exception as e:  # a broken request must not stop the server
                    answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

    if os.path.exists(path):
        os.unlink(path)
    server = await asyncio.start_unix_server(handle, path=path, limit=1 << 26)
    os.chmod(path, 0o600)
    return server


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, choices=suites.SUITE_NAMES)
    parser.add_argument("--control", required=True, help="path of the control socket")
    args = parser.parse_args()
    state = SuiteServer(args.suite)
    control = await serve_control(state, args.control)
    server: Server = Server(f"agentdojo-{args.suite}")

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return state.tools()

    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict) -> types.CallToolResult:
        return state.call(name, arguments)

    async with control, stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    asyncio.run(main())
