// Drives `kernex serve` with the official `openai` npm client and prints what it saw as JSON.
// Usage: node openai_client.mjs BASE_URL API_KEY
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const out = {};

const plain = await client.chat.completions.create({
  model: "kernex",
  messages: [{ role: "user", content: "first question" }],
});
out.plain = {
  id: plain.id,
  object: plain.object,
  model: plain.model,
  role: plain.choices[0].message.role,
  content: plain.choices[0].message.content,
  finish_reason: plain.choices[0].finish_reason,
  usage: plain.usage ?? null,
};

const stream = await client.chat.completions.create({
  model: "kernex",
  messages: [{ role: "user", content: "second question" }],
  stream: true,
});
out.stream = { chunks: 0, text: "", objects: [], finish_reason: null, ids: [] };
for await (const chunk of stream) {
  out.stream.chunks += 1;
  if (!out.stream.objects.includes(chunk.object)) out.stream.objects.push(chunk.object);
  if (!out.stream.ids.includes(chunk.id)) out.stream.ids.push(chunk.id);
  const choice = chunk.choices?.[0];
  if (choice?.delta?.content) out.stream.text += choice.delta.content;
  if (choice?.finish_reason) out.stream.finish_reason = choice.finish_reason;
}

// A session named by X-Session-Id; the messages are the conversation, so the client sends it all.
// `user` is the end user, any string (an e-mail), never the session.
const session = { headers: { "X-Session-Id": "npm-session" } };
const one = await client.chat.completions.create(
  { model: "kernex", user: "ada@example.com", messages: [{ role: "user", content: "turn one" }] }, session);
await client.chat.completions.create({
  model: "kernex", user: "ada@example.com",
  messages: [{ role: "user", content: "turn one" }, one.choices[0].message, { role: "user", content: "turn two" }],
}, session);

const models = [];
for await (const m of client.models.list()) models.push({ id: m.id, object: m.object, owned_by: m.owned_by });
out.models = models;

try {
  await client.chat.completions.create({ model: "kernex", messages: "not an array" });
  out.bad_request = "no error";
} catch (e) {
  out.bad_request = { status: e.status ?? null, name: e.constructor?.name ?? null, code: e.error?.code ?? e.code ?? null };
}

console.log(JSON.stringify(out));
