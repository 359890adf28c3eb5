// Drives `kernex serve`'s Responses API (and the model routes) with clients nobody here wrote:
// the official `openai` client, the Vercel AI SDK (`@ai-sdk/openai`, whose default is the
// Responses API, and `@ai-sdk/openai-compatible` on chat completions) and LangChain's ChatOpenAI
// with useResponsesApi. Prints what each saw as JSON; the C++ test judges it.
// Usage: node responses_clients.mjs BASE_URL API_KEY
import OpenAI from "openai";
import { generateText, streamText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";

const [baseURL, apiKey] = process.argv.slice(2);
const out = {};
const failed = (e) => ({ error: String(e?.message ?? e), status: e?.status ?? e?.statusCode ?? null });

async function step(name, body) {
  try {
    out[name] = await body();
  } catch (e) {
    out[name] = failed(e);
  }
}

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
let first = null;
await step("openai_plain", async () => {
  first = await client.responses.create({ model: "kernex", input: "plain question" });
  return { id: first.id, object: first.object, status: first.status, text: first.output_text };
});
await step("openai_stream", async () => {
  const stream = await client.responses.create({ model: "kernex", input: "stream question", stream: true });
  const types = [];
  let text = "";
  let final = null;
  for await (const event of stream) {
    if (!types.includes(event.type)) types.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.completed") final = event.response;
  }
  return { types, text, final_status: final?.status ?? null, final_text: final?.output?.[0]?.content?.[0]?.text ?? null };
});
await step("openai_chain", async () => {
  const next = await client.responses.create({ model: "kernex", previous_response_id: first.id, input: "follow up" });
  return { text: next.output_text, previous: next.previous_response_id };
});
await step("openai_retrieve", async () => {
  const got = await client.responses.retrieve(first.id);
  return { id: got.id, text: got.output_text };
});
await step("models_retrieve", async () => {
  const m = await client.models.retrieve("kernex");
  return { id: m.id, object: m.object };
});
await step("models_missing", async () => {
  try {
    await client.models.retrieve("no-such-model");
    return "no error";
  } catch (e) {
    return { status: e.status ?? null, code: e.code ?? null, name: e.constructor?.name ?? null };
  }
});

const sdk = createOpenAI({ baseURL, apiKey });
await step("ai_generate", async () => {
  const r = await generateText({ model: sdk("kernex"), prompt: "ai sdk question", maxRetries: 0 });
  return { text: r.text, finishReason: r.finishReason };
});
await step("ai_stream", async () => {
  const r = streamText({ model: sdk("kernex"), prompt: "ai sdk stream", maxRetries: 0, onError: () => {} });
  let text = "";
  for await (const delta of r.textStream) text += delta;
  return { text, finishReason: await r.finishReason };
});
const compatible = createOpenAICompatible({ name: "kernex", baseURL, apiKey });
await step("ai_compatible", async () => {
  const r = await generateText({ model: compatible("kernex"), prompt: "compatible question", maxRetries: 0 });
  return { text: r.text, finishReason: r.finishReason };
});

await step("langchain_responses", async () => {
  const model = new ChatOpenAI({ model: "kernex", apiKey, configuration: { baseURL }, useResponsesApi: true, maxRetries: 0 });
  const r = await model.invoke("langchain question");
  const text = typeof r.content === "string" ? r.content : r.content.map((p) => p.text ?? "").join("");
  return { text };
});

console.log(JSON.stringify(out));
