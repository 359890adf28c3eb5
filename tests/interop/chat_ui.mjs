// The request pattern of a chat UI, with fetch and SSE as a browser page does it: the answer
// streams while a title is asked for in parallel for the same user; the user stops a long answer
// mid-stream, regenerates, edits an earlier message. The conversation is named by X-Session-Id.
// Prints what it saw as JSON. Usage: node chat_ui.mjs BASE_URL
const [baseURL] = process.argv.slice(2);
const user = "ui.user@example.com";
const session = { "Content-Type": "application/json", "X-Session-Id": "ui-chat-1" };
const out = {};

async function chat(messages, { stream = false, headers = session, signal, onDelta } = {}) {
  const r = await fetch(`${baseURL}/chat/completions`, {
    method: "POST", headers, signal, body: JSON.stringify({ model: "kernex", user, messages, stream }),
  });
  if (!stream) return { status: r.status, body: await r.json() };
  if (r.status !== 200) return { status: r.status, body: await r.json() };
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let text = "", buffer = "", id = null, finish = null;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/^data: /, "");
      buffer = buffer.slice(end + 2);
      if (line === "[DONE]") continue;
      const chunk = JSON.parse(line);
      id = chunk.id;
      const delta = chunk.choices?.[0]?.delta?.content ?? "";
      text += delta;
      finish = chunk.choices?.[0]?.finish_reason ?? finish;
      if (delta && onDelta) onDelta(delta);
    }
  }
  return { status: 200, text, id, finish };
}

async function runStatus(id) {
  for (let i = 0; i < 500; i++) {
    const r = await (await fetch(`${baseURL}/runs/${id}`)).json();
    if (["done", "failed", "cancelled"].includes(r.status)) return r.status;
    await new Promise((ok) => setTimeout(ok, 10));
  }
  return null;
}

const u1 = { role: "user", content: "Tell me about Rust" };
const [answer, title] = await Promise.all([
  chat([u1], { stream: true }),
  chat([{ role: "user", content: "Write a short title for: Tell me about Rust" }],
    { headers: { "Content-Type": "application/json" } }),
]);
out.parallel = { answer: answer.status, title: title.status, title_text: title.body?.choices?.[0]?.message?.content };
const a1 = { role: "assistant", content: answer.text };

const regenerated = await chat([u1], { stream: true });
out.regenerate = { status: regenerated.status, text: regenerated.text };

const u2 = { role: "user", content: "And about Go?" };
const second = await chat([u1, a1, u2]);
out.second = second.status;
const edited = await chat([u1, a1, { role: "user", content: "And about Zig?" }]);
out.edit = { status: edited.status, text: edited.body?.choices?.[0]?.message?.content };

const controller = new AbortController();
let stoppedId = null;
try {
  await chat([u1, a1, { role: "user", content: "a long story" }], {
    stream: true, signal: controller.signal, onDelta: () => controller.abort(),
  });
  out.stop = { error: "not stopped" };
} catch (e) {
  out.stop = { error: e.name };
}
// The stopped run's id: the session's newest run.
const runs = await (await fetch(`${baseURL}/sessions/ui-chat-1/runs`)).json();
stoppedId = runs.runs?.[0]?.run_id;
out.stop.status = await runStatus(stoppedId);
const after = await chat([u1, a1, { role: "user", content: "never mind, thanks" }]);
out.after_stop = after.status;
console.log(JSON.stringify(out));
