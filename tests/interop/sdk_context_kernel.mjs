// Uses `kernex mcp serve` as a context kernel with the official TypeScript SDK client: a document
// loaded into the REPL, looked at, and a sub-query its code asks answered by this client (deferred
// mode). Prints what it saw as JSON; the C++ test judges it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
const client = new Client({ name: "kernex-context-kernel", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args, stderr: "inherit" }));

// Each tool's text content, parsed when it is JSON.
async function call(name, args) {
  const result = await client.callTool({ name, arguments: args });
  const text = result.content.map((c) => c.text).join("");
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { isError: result.isError === true, body };
}

const out = { tools: (await client.listTools()).tools.map((t) => t.name) };
const doc = "INFO start\nERROR disk full\nINFO retry\nERROR disk still full\nINFO done\n";
out.load = await call("load_context", { name: "log", text: doc });
out.peek = await call("peek", { name: "log", start: 1, end: 3 });
out.scan = await call("scan", { name: "log", pattern: "^ERROR" });
out.ask = await call("eval_code", {
  code: "errors = [l for l in log['lines'] if l.startswith('ERROR')]\n" +
    "summary = llm_query('Summarise: ' + ' | '.join(errors))\nprint(len(errors))",
});
const pending = out.ask.body.pending_queries ?? [];
out.answer = pending.length === 1
  ? await call("provide_answers", { answers: { [pending[0].id]: "the disk is full" } })
  : null;
out.read = pending.length === 1
  ? await call("eval_code", {
    code: `print(${pending[0].id} + ' / ' + answers['${pending[0].id}'] + ' / ' + str(len(errors)))`,
  })
  : null;
await client.close();
console.log(JSON.stringify(out));
