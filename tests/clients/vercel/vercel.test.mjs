// The Vercel AI SDK (`ai` + `@ai-sdk/openai`, pinned in package.json) through Tether, as an
// app written with it talks to an agent: turn 1, then the agent is killed, turn 2 is sent
// and the agent comes back while the SDK's default retries (2, with backoff) are waiting.
// Each case asserts turn 2's answer (it needs turn 1's history) and the log: every user
// message once on the session's history.
//
// Run by gateway/tests/e2e/sdk_clients.rs: `node --test vercel.test.mjs` with TETHER_URL
// (Tether, whose upstream is 127.0.0.1:AGENT_PORT), AGENT_PORT and FAKE_AGENT (the path of
// tests/fake_agent.py). This file owns the agent process on AGENT_PORT.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

import { generateText, streamText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";

const TETHER = process.env.TETHER_URL;
const PORT = process.env.AGENT_PORT;
const FAKE_AGENT = process.env.FAKE_AGENT;
const U1 = "My project is named zebra42. Reply with OK.";
const Q = "What is my project named?";

let agent = null;

/** Starts the fake agent on AGENT_PORT; resolves once it is listening. */
function startAgent() {
  return new Promise((resolve, reject) => {
    const child = spawn("python3", [FAKE_AGENT, "--port", PORT], { stdio: ["ignore", "pipe", "inherit"] });
    child.on("error", reject);
    createInterface({ input: child.stdout }).on("line", (line) => {
      if (line.startsWith("READY")) resolve(child);
    });
    agent = child;
  });
}

function killAgent() {
  return new Promise((resolve) => {
    if (!agent || agent.exitCode !== null) return resolve();
    agent.once("exit", () => resolve());
    agent.kill("SIGKILL");
  });
}

after(killAgent);

/** Kills the agent, then starts it again `ms` after turn 2 has been sent. */
async function outage(ms, turn2) {
  await killAgent();
  const back = new Promise((resolve) => setTimeout(resolve, ms)).then(startAgent);
  try {
    return await turn2();
  } finally {
    await back;
  }
}

// Every request body the SDK sent, to see what it sent (item references).
const sent = [];
const openai = createOpenAI({
  baseURL: `${TETHER}/v1`,
  apiKey: "unused",
  fetch: (url, init) => {
    sent.push(JSON.parse(init.body));
    return fetch(url, init);
  },
});

async function userMessagesInLog(session) {
  const r = await fetch(`${TETHER}/agentengine/api/v1/ListSessionEvents`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ SessionId: session, Limit: 500 }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  const events = (await r.json()).Data.Events;
  return events
    .filter((e) => e.EventType === "message" && e.Role === "user" && !e.Superseded)
    .map((e) => e.Content.text);
}

function sessionOf(result) {
  const session = result.response.headers["x-session-id"];
  assert.ok(session, "Tether names the session");
  return session;
}

test("Responses with response.messages (earlier output as item references)", async () => {
  await startAgent();
  const messages = [{ role: "user", content: U1 }];
  const first = await generateText({ model: openai("fake"), messages });
  assert.equal(first.text, "OK.");
  const session = sessionOf(first);
  messages.push(...first.response.messages, { role: "user", content: Q });
  const second = await outage(1500, () => generateText({ model: openai("fake"), messages }));
  assert.equal(second.text, "zebra42");
  const input = sent.at(-1).input;
  assert.ok(sent.length >= 3, "turn 2 was retried");
  assert.deepEqual(input[1], { type: "item_reference", id: first.response.messages[0].content[0].providerOptions.openai.itemId });
  assert.equal(sessionOf(second), session, "the references name turn 1's session");
  assert.deepEqual(await userMessagesInLog(session), [U1, Q]);
});

test("Responses streamed with previousResponseId", async () => {
  const first = await generateText({ model: openai("fake"), prompt: U1 });
  const session = sessionOf(first);
  const second = await outage(1500, async () => {
    const stream = streamText({
      model: openai("fake"),
      prompt: Q,
      providerOptions: { openai: { previousResponseId: first.response.id } },
    });
    return { text: await stream.text, response: await stream.response };
  });
  assert.equal(second.text, "zebra42");
  assert.equal(sessionOf(second), session, "no fork from the retry");
  assert.deepEqual(await userMessagesInLog(session), [U1, Q]);
});

test("Responses with conversation (the session x-session-id named)", async () => {
  const first = await generateText({ model: openai("fake"), prompt: U1 });
  const session = sessionOf(first);
  const second = await outage(1500, () =>
    generateText({ model: openai("fake"), prompt: Q, providerOptions: { openai: { conversation: session } } }),
  );
  assert.equal(second.text, "zebra42");
  assert.equal(sessionOf(second), session);
  assert.deepEqual(await userMessagesInLog(session), [U1, Q]);
});

test("Chat Completions resending the history in the session x-session-id named", async () => {
  const messages = [{ role: "user", content: U1 }];
  const first = await generateText({ model: openai.chat("fake"), messages });
  const session = sessionOf(first);
  messages.push(...first.response.messages, { role: "user", content: Q });
  const second = await outage(1500, async () => {
    const stream = streamText({ model: openai.chat("fake"), messages, headers: { "x-session-id": session } });
    return { text: await stream.text, response: await stream.response };
  });
  assert.equal(second.text, "zebra42");
  assert.equal(sessionOf(second), session);
  assert.deepEqual(await userMessagesInLog(session), [U1, Q]);
});
