// The official TypeScript SDK client's side of bench/mcp: starts the same server the kernel's client
// talks to, warms up, then times sequential tools/call round trips to `echo` and prints them as JSON.
// Usage: node mcp_sdk_client.mjs CALLS WARMUP COMMAND ARGS...
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [calls, warmup, command, ...args] = process.argv.slice(2);
const client = new Client({ name: "kernex-bench", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args, stderr: "ignore" }));
const call = async (i) => {
  const r = await client.callTool({ name: "echo", arguments: { message: `hello ${i}` } });
  if (r.isError || !r.content?.[0]?.text?.includes(`hello ${i}`)) throw new Error(`bad echo answer ${JSON.stringify(r)}`);
};
for (let i = 0; i < Number(warmup); i++) await call(i);
const start = process.hrtime.bigint();
for (let i = 0; i < Number(calls); i++) await call(i);
const ns = Number(process.hrtime.bigint() - start);
await client.close();
console.log(JSON.stringify({ calls: Number(calls), seconds: ns / 1e9 }));
