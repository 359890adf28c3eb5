#!/usr/bin/env python3
"""Prints what examples/demo/run shows of each run, from the kernel's own records.

show.py skill SHOW.json             a skill's toolboxes as `kernex skills show` parsed them
show.py tools RESULT.json           a run's tool calls, with their results
show.py answer RESULT.json          its answer
show.py audit AUDIT.jsonl SKIP      the audit hook's lines after the first SKIP
show.py memory REQUESTS.jsonl SKIP  what the model received from memory (replay's record)
show.py compaction EXPORT.json      the compaction summary kept in memory.db
"""
import json
import sys
import textwrap

WIDTH = 100


def out(text, first, rest=None):
    """Prints text wrapped to WIDTH, the first line after `first`, the others after `rest`."""
    rest = " " * len(first) if rest is None else rest
    if not text.strip():
        text = "(nothing)"
    lines = text.rstrip("\n").split("\n")
    for i, line in enumerate(lines):
        print(textwrap.fill(line, WIDTH, initial_indent=first if i == 0 else rest,
                            subsequent_indent=rest, break_on_hyphens=False))


def skill(path):
    with open(path) as f:
        parsed = json.load(f)
    for t in parsed["toolboxes"]:
        out(f'skill {parsed["name"]}: toolbox {t["name"]} runs `{" ".join([t["command"]] + t["args"])}` '
            f'in the sandbox, may execute {", ".join(t["allowed_commands"])}, receives '
            f'{", ".join(t["env_passthrough"])} (manifest: {parsed["file"]})', "  ", "    ")


def tools(path):
    with open(path) as f:
        result = json.load(f)
    for call in result["tool_calls"]:
        out(call["name"] + " " + json.dumps(call["arguments"]), "  tool ")
        out(call["result"], "    ✗ " if call["is_error"] else "    ")


def answer(path):
    with open(path) as f:
        out(json.load(f)["text"], "model> ")


def new_lines(path, skip):
    with open(path) as f:
        return [json.loads(line) for line in f.readlines()[int(skip):]]


def audit(path, skip):
    for line in new_lines(path, skip):
        status = "error" if line["is_error"] else "ok"
        result_lines = line["result"].rstrip("\n").count("\n") + 1
        out(f'{line["ts"][11:19]} {line["tool"]} {json.dumps(line["arguments"])} {status}, '
            f'{result_lines} line(s) of result', "    ")


def memory(path, skip):
    requests = new_lines(path, skip)
    earlier = requests[0]["messages"][:-1] if requests else []
    if not earlier:
        print("  memory: the model received no earlier message")
        return
    first = earlier[0].get("content", "")
    out(f'with the question, the model received {len(earlier)} messages of run 1 from '
        f'memory.db, starting with "{first}"', "  memory: ", "    ")


def compaction(path):
    with open(path) as f:
        summaries = json.load(f)["summaries"]
    if not summaries:
        print("  compaction: none (the history still fits its window)")
        return
    s = summaries[-1]
    out(f'the {s["covered_messages"]} oldest messages left the window; the model summarised '
        f'them, and the summary (kept in memory.db) stands in for them in the prompt:',
        "  compaction: ", "    ")
    out(s["text"], "    | ", "    | ")


if __name__ == "__main__":
    commands = {"skill": skill, "tools": tools, "answer": answer, "audit": audit, "memory": memory, "compaction": compaction}
    if len(sys.argv) < 3 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
