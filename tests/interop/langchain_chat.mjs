// LangChain JS (`@langchain/openai` 1.x) against `kernex serve`, unchanged: invoke, stream,
// bindTools with a ToolMessage round trip, withStructuredOutput, and a history holding tool calls
// from elsewhere. Prints what it saw as JSON. Usage: node langchain_chat.mjs BASE_URL
import { ChatOpenAI } from "@langchain/openai";
import { AIMessage, HumanMessage, SystemMessage, ToolMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { z } from "zod";

const [baseURL] = process.argv.slice(2);
const llm = new ChatOpenAI({ model: "kernex", apiKey: "sk-test", configuration: { baseURL }, maxRetries: 0, temperature: 0 });
const out = {};

out.plain = (await llm.invoke("hello there")).content;
let streamed = "";
for await (const chunk of await llm.stream("stream please")) streamed += chunk.content;
out.streamed = streamed;

const getWeather = tool(async ({ city }) => `sunny in ${city}`, {
  name: "get_weather", description: "The weather in a city", schema: z.object({ city: z.string() }),
});
const withTools = llm.bindTools([getWeather]);
const question = new HumanMessage("What is the weather in Paris?");
const ai = await withTools.invoke([question]);
out.tool_calls = ai.tool_calls.map((c) => ({ name: c.name, args: c.args, has_id: Boolean(c.id) }));
const toolMessage = await getWeather.invoke(ai.tool_calls[0]);
out.tool_message_type = toolMessage.constructor.name;
out.after_tool = (await withTools.invoke([question, ai, toolMessage])).content;

const Person = z.object({ name: z.string(), age: z.number() });
out.structured = await llm.withStructuredOutput(Person, { name: "person" }).invoke("Give me a person");
out.structured_tools = await llm
  .withStructuredOutput(Person, { name: "person", method: "functionCalling" })
  .invoke("Give me a person");

out.history = (await llm.invoke([
  new SystemMessage("be brief"),
  new HumanMessage("look it up"),
  new AIMessage({ content: "", tool_calls: [{ id: "old1", name: "lookup", args: { q: "x" } }] }),
  new ToolMessage({ tool_call_id: "old1", content: "42" }),
  new AIMessage("It is 42."),
  new HumanMessage("thanks, and now?"),
])).content;
console.log(JSON.stringify(out));
