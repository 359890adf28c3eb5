// `kernex mcp serve` with the official TypeScript SDK client: what code submits comes back in the
// eval_code answer, and a call the client aborts (notifications/cancelled) stops at once, so the
// next call does not wait for it. Prints what it saw as JSON; the C++ test judges it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [command, ...args] = process.argv.slice(2);
const client = new Client({ name: "kernex-cancel", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args, stderr: "inherit" }));

async function call(name, args, options) {
  const result = await client.callTool({ name, arguments: args }, CallToolResultSchema, options);
  const text = result.content.map((c) => c.text).join("");
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { isError: result.isError === true, body };
}

const out = {};
out.submit = await call("eval_code", { code: "submit_result({'answer': 42, 'items': ['a']})\nprint('done')" });
out.set = await call("eval_code", { code: "kept = 7\nprint('set')" });

// A long call, aborted once it has surely started (it prints, then sleeps for a minute).
const controller = new AbortController();
const started = Date.now();
const long = call("eval_code", { code: "import time\nprint('sleeping', flush=True)\ntime.sleep(60)" },
  { signal: controller.signal, timeout: 120000 });
await new Promise((r) => setTimeout(r, 1500));
const aborted = Date.now();
controller.abort("the user pressed stop");
try {
  await long;
  out.long = "finished";
} catch (e) {
  out.long = "aborted";
}
// The next call runs as soon as the old one stopped (a fresh REPL: its state is gone, and said so).
out.next = await call("eval_code", { code: "print('next')" });
out.next_ms = Date.now() - aborted;
out.long_ms = aborted - started;
await client.close();
console.log(JSON.stringify(out));
