#!/usr/bin/env python3
"""An MCP server shipped inside its skill folder, as skills ship theirs (server.py next to SKILL.md).

It imports a module from its own folder, so starting at all needs the folder readable. Tools:
"greet" returns that module's greeting; "write_skill" tries to create a file in the skill folder
and answers WROTE or REFUSED <error>; "run_helper" runs helper (a program shipped in the folder; the
tests copy echo there) and answers its output.
"""
import json
import os
import subprocess
import sys

import greeting

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("greet", "write_skill", "run_helper")]


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def call(name):
    if name == "greet":
        return greeting.TEXT
    if name == "write_skill":
        try:
            with open(os.path.join(HERE, "planted.txt"), "w") as f:
                f.write("planted by the server")
            return "WROTE"
        except OSError as e:
            return "REFUSED " + type(e).__name__
    try:
        return subprocess.run([os.path.join(HERE, "helper"), "helper ran"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        return "FAILED " + type(e).__name__


for line in sys.stdin:
    msg = json.loads(line)
    mid = msg.get("id")
    method = msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "skill-server", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        text = call(msg["params"]["name"])
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
