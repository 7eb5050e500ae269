// One turn with the unmodified @a2a-js/sdk client, through the transport the agent card
// lists for `TRANSPORT` (JSONRPC, HTTP+JSON or GRPC): prints {"answer", "contextId",
// "transport"} as JSON. Driven by tests/interop/test_a2a_grpc.py; see package.json.
//
//   node turn.mjs BASE_URL TRANSPORT API_KEY TEXT [CONTEXT_ID]
import { randomUUID } from "node:crypto";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from "@a2a-js/sdk/client";
import { GrpcTransportFactory } from "@a2a-js/sdk/client/grpc";

const [base, transport, key, text, context] = process.argv.slice(2);
const auth = { authorization: `Bearer ${key}` };
const fetchImpl = (url, init = {}) =>
  fetch(url, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers)), ...auth } });

const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [
      new JsonRpcTransportFactory({ fetchImpl }),
      new RestTransportFactory({ fetchImpl }),
      new GrpcTransportFactory(),
    ],
    preferredTransports: [transport],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
  }),
);
const client = await factory.createFromUrl(base);
// Over gRPC a message needs every proto field (external-clients.md).
const message = {
  messageId: randomUUID(),
  contextId: context ?? "",
  taskId: "",
  role: 1, // ROLE_USER
  parts: [{ content: { $case: "text", value: text } }],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
};
const result = await client.sendMessage({ message }, { serviceParameters: auth });
const task = result.status ? result : undefined;
const parts = task ? (task.status?.message?.parts ?? []) : (result.parts ?? []);
const answer = parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
console.log(JSON.stringify({ answer, contextId: task ? task.contextId : result.contextId, transport: client.transport.protocolName }));
