// The official `openai` npm client (6.x) across a server restart: `ask` sends a question with a
// client tool and keeps the conversation (its tool_calls answer and the tool's results) in
// STATE_FILE; `answer` sends it on, to a server that may have been killed and started again in
// between. Prints what it saw as JSON. Usage: node openai_sdk_parked.mjs BASE_URL STATE_FILE ask|answer
import { readFileSync, writeFileSync } from "node:fs";
import OpenAI from "openai6";

const [baseURL, stateFile, phase] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "sk-test", maxRetries: 0, timeout: 60000 });
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

if (phase === "ask") {
  const messages = [{ role: "user", content: "What is the weather in Oslo?" }];
  const first = await client.chat.completions.create({ model: "kernex", messages, tools });
  const message = first.choices[0].message;
  messages.push(message);
  for (const call of message.tool_calls ?? []) {
    const { city } = JSON.parse(call.function.arguments);
    messages.push({ role: "tool", tool_call_id: call.id, content: `sunny in ${city}` });
  }
  writeFileSync(stateFile, JSON.stringify(messages));
  console.log(JSON.stringify({ finish_reason: first.choices[0].finish_reason, calls: message.tool_calls ?? [] }));
} else {
  const messages = JSON.parse(readFileSync(stateFile, "utf8"));
  const second = await client.chat.completions.create({ model: "kernex", messages, tools });
  console.log(JSON.stringify({ answer: second.choices[0].message.content, finish_reason: second.choices[0].finish_reason }));
}
