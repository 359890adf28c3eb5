// The official `openai` npm client (6.x, aliased `openai6`) against `kernex serve`, as its README
// shows it: chat plain and streaming, a tools round trip, structured output, abort, a refused
// field. Prints what it saw as JSON. Usage: node openai_sdk_chat.mjs BASE_URL
import OpenAI from "openai6";

const [baseURL] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "sk-test", maxRetries: 0, timeout: 60000 });
const model = "kernex";
const out = {};

async function runStatus(id) {
  for (let i = 0; i < 500; i++) {
    const r = await (await fetch(`${baseURL}/runs/${id}`)).json();
    if (["done", "failed", "cancelled"].includes(r.status)) return r;
    await new Promise((ok) => setTimeout(ok, 10));
  }
  return null;
}

const plain = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "hello there" }],
  temperature: 0.2, max_completion_tokens: 50, seed: 7, stop: ["END"],
});
out.plain = { content: plain.choices[0].message.content, finish_reason: plain.choices[0].finish_reason, usage: plain.usage };

let streamed = "";
let streamFinish = null;
let streamUsage = null;
const stream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "stream please" }], stream: true, stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  streamed += chunk.choices[0]?.delta?.content ?? "";
  streamFinish = chunk.choices[0]?.finish_reason ?? streamFinish;
  if (chunk.usage) streamUsage = chunk.usage;
}
out.stream = { text: streamed, finish_reason: streamFinish, usage: streamUsage };

const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const first = await client.chat.completions.create({ model, messages, tools, tool_choice: "auto" });
out.tool_round = { finish_reason: first.choices[0].finish_reason, calls: first.choices[0].message.tool_calls };
messages.push(first.choices[0].message);
for (const call of first.choices[0].message.tool_calls ?? []) {
  const { city } = JSON.parse(call.function.arguments);
  messages.push({ role: "tool", tool_call_id: call.id, content: `sunny in ${city}` });
}
const second = await client.chat.completions.create({ model, messages, tools });
out.tool_round.answer = second.choices[0].message.content;
out.tool_round.final_finish = second.choices[0].finish_reason;

// Streamed tool calls, assembled from their deltas as the SDK's users do.
const toolStream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "What is the weather in Oslo?" }], tools, stream: true,
});
const assembled = [];
let toolFinish = null;
for await (const chunk of toolStream) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
    assembled[d.index] ??= { id: "", name: "", arguments: "" };
    if (d.id) assembled[d.index].id = d.id;
    if (d.function?.name) assembled[d.index].name += d.function.name;
    if (d.function?.arguments) assembled[d.index].arguments += d.function.arguments;
  }
  toolFinish = chunk.choices[0]?.finish_reason ?? toolFinish;
}
out.tool_stream = { calls: assembled, finish_reason: toolFinish };

const person = {
  type: "object", additionalProperties: false,
  properties: { name: { type: "string" }, age: { type: "number" } }, required: ["name", "age"],
};
const structured = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Give me a person" }],
  response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: person } },
});
out.structured = JSON.parse(structured.choices[0].message.content);

const controller = new AbortController();
let runId = null;
try {
  const s = await client.chat.completions.create(
    { model, messages: [{ role: "user", content: "a long story" }], stream: true }, { signal: controller.signal });
  for await (const chunk of s) {
    runId = chunk.id.replace(/^chatcmpl-/, "");
    if (chunk.choices[0]?.delta?.content) controller.abort();
  }
  out.abort = {}; // the SDK ends an aborted stream's iteration quietly
} catch (e) {
  out.abort = { error: e.constructor?.name };
}
const stopped = await runStatus(runId);
Object.assign(out.abort, { aborted: controller.signal.aborted, status: stopped?.status, outcome: stopped?.result?.outcome });

try {
  await client.chat.completions.create({ model, messages: [{ role: "user", content: "two" }], n: 2 });
  out.n2 = "accepted";
} catch (e) {
  out.n2 = { status: e.status, param: e.param ?? e.error?.param ?? null };
}
console.log(JSON.stringify(out));
