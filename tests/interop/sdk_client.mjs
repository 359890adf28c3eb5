// Drives `kernex mcp serve` with the official TypeScript SDK client and prints what it saw as JSON.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
const client = new Client({ name: "kernex-interop", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args, stderr: "inherit" }));
const out = { server: client.getServerVersion(), tools: (await client.listTools()).tools.map((t) => t.name) };
out.word_count = await client.callTool({ name: "word_count", arguments: { text: "one two three" } });
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
} catch (e) {
  out.unknown_tool_error = e.code;
}
try {
  await client.request({ method: "resources/list", params: {} }, (await import("@modelcontextprotocol/sdk/types.js")).ListResourcesResultSchema);
} catch (e) {
  out.unknown_method_error = e.code;
}
await client.close();
console.log(JSON.stringify(out));
