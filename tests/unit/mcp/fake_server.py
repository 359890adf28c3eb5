#!/usr/bin/env python3
"""A scripted MCP server over stdio for the client tests.

argv[1] is the behaviour of tools/call for the tool "fault": die | hang | garbage | deep | huge | ok.
Tools come in two pages (cursor "p2"); "echo" returns text + structured content; "image" an image,
a resource link and an embedded resource; "fail" isError. It pings the client before answering
tools/call for "echo" (a server->client request the client must answer), and logs to stderr.
"""
import json
import os
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
version = sys.argv[2] if len(sys.argv) > 2 else None


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


sys.stderr.write("fake server starting in mode %s\n" % mode)
sys.stderr.flush()
PAGE1 = [{"name": "echo", "description": "Echoes its message", "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}},
         {"name": "image", "description": "An image and links"}]
PAGE2 = [{"name": "fail", "description": "Always fails"},
         {"name": "fault", "description": "Misbehaves"},
         {"name": "env", "description": "Environment variables"},
         {"no_name": True}]

while True:
    msg = read()
    method = msg.get("method")
    mid = msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": version or msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}})
    elif method == "notifications/initialized":
        sys.stderr.write("initialized\n")
        sys.stderr.flush()
    elif method == "tools/list":
        cursor = (msg.get("params") or {}).get("cursor")
        if cursor is None:
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": PAGE1, "nextCursor": "p2"}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": PAGE2}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments", {})
        if name == "echo":
            send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
            pong = read()
            assert pong.get("id") == "srv-1" and "result" in pong, pong
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "echoing"}})
            structured = {"echo": args.get("message")}
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "Echo: %s" % args.get("message")}],
                "structuredContent": structured}})
        elif name == "image":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///x.txt", "name": "x.txt", "mimeType": "text/plain", "description": "a file"},
                {"type": "resource", "resource": {"uri": "mem://note", "mimeType": "text/plain", "text": "note body"}}]}})
        elif name == "fail":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "it broke"}], "isError": True}})
        elif name == "env":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(dict(os.environ))}]}})
        elif name == "fault":
            sys.stderr.write("about to misbehave: %s\n" % mode)
            sys.stderr.flush()
            if mode == "die":
                os._exit(3)
            elif mode == "hang":
                time.sleep(3600)
            elif mode == "garbage":
                sys.stdout.write("this is not json\n")
                sys.stdout.flush()
                time.sleep(3600)
            elif mode == "deep":  # 20000 levels in 40 KB: dump() of it would overflow the kernel's stack
                sys.stdout.write('{"jsonrpc":"2.0","id":%d,"result":{"content":%s%s}}\n' % (mid, "[" * 20000, "]" * 20000))
                sys.stdout.flush()
                time.sleep(3600)
            elif mode == "huge":
                sys.stdout.write("x" * (1 << 20))
                sys.stdout.flush()
                time.sleep(3600)
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "fine"}]}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "Unknown tool: " + name}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
