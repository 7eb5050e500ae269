//! Bodies captured from a2a-sdk 1.3.0 agents (uvicorn), byte for byte.

/// v0.3 `message/stream`, one turn.
pub const V03_STREAM: &str = r#"data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","history":[{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"message","messageId":"c1c1fe40-17f3-4cbb-a0d0-bf9f06265b27","parts":[{"kind":"text","text":"My project is named zebra42."}],"role":"user","taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}],"id":"fec33ee8-d85e-4039-b755-a15bd9aa5299","kind":"task","status":{"state":"submitted"}}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","final":false,"kind":"status-update","status":{"state":"working","timestamp":"2026-12-02T14:22:18.687841Z"},"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":false,"artifact":{"artifactId":"answer","name":"answer","parts":[{"kind":"text","text":"You "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"said: "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"My "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"project "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"is "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"named "}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":false,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"zebra42."}]},"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"artifact-update","lastChunk":true,"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

data: {"id":"v03_message_stream_turn1","jsonrpc":"2.0","result":{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","final":true,"kind":"status-update","status":{"message":{"contextId":"326b0b34-2b77-41e8-abae-1cf42b70780d","kind":"message","messageId":"03defe11-cae7-4b6f-8c11-7c1d256305c1","parts":[{"kind":"text","text":"You said: My project is named zebra42."}],"role":"agent","taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"},"state":"completed","timestamp":"2026-12-02T14:22:18.718887Z"},"taskId":"fec33ee8-d85e-4039-b755-a15bd9aa5299"}}

"#;
/// v1.0 `SendStreamingMessage`, one turn.
pub const V10_STREAM: &str = r#"data: {"result": {"task": {"id": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "dab650fd-e303-489c-8df1-c1d08ef016f2", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "role": "ROLE_USER", "parts": [{"text": "My project is named zebra42."}]}]}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:18.852818Z"}}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": "You "}]}}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "said: "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "My "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "project "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "is "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "named "}]}, "append": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "artifact": {"artifactId": "answer", "parts": [{"text": "zebra42."}]}, "append": true, "lastChunk": true}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "8a668897-7484-4710-a96f-0d6d8b745178", "contextId": "632b4b73-3433-4d82-823d-e10e5d2e8957", "taskId": "06170946-a53c-4498-9ba8-e9d947eb44b7", "role": "ROLE_AGENT", "parts": [{"text": "You said: My project is named zebra42."}]}, "timestamp": "2026-12-02T14:22:18.888638Z"}}}, "id": "v10_SendStreamingMessage_turn1", "jsonrpc": "2.0"}

"#;
/// v0.3 stream of a task the client cancelled.
pub const V03_CANCELED_STREAM: &str = r#"data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","history":[{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"message","messageId":"5d425745-12da-4c36-bbb6-d0eb97659fcc","parts":[{"kind":"text","text":"slow:20:200 count for me"}],"role":"user","taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}],"id":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c","kind":"task","status":{"state":"submitted"}}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","final":false,"kind":"status-update","status":{"state":"working","timestamp":"2026-12-02T14:22:18.957564Z"},"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"append":false,"artifact":{"artifactId":"answer","name":"answer","parts":[{"kind":"text","text":"w1 "}]},"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"artifact-update","lastChunk":false,"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"w2 "}]},"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"artifact-update","lastChunk":false,"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"answer","parts":[{"kind":"text","text":"w3 "}]},"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"artifact-update","lastChunk":false,"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

data: {"id":"v03_message_stream_slow_then_canceled","jsonrpc":"2.0","result":{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","final":true,"kind":"status-update","status":{"state":"canceled","timestamp":"2026-12-02T14:22:19.984255Z"},"taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}}

"#;
/// v0.3 `tasks/get` of that task afterwards.
pub const V03_GET_AFTER_CANCEL: &str = r#"{"id":"v03_tasks_get_after_cancel","jsonrpc":"2.0","result":{"artifacts":[{"artifactId":"answer","name":"answer","parts":[{"kind":"text","text":"w1 "},{"kind":"text","text":"w2 "},{"kind":"text","text":"w3 "}]}],"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","history":[{"contextId":"44205b86-0901-4d69-a32d-21ff59ab2c96","kind":"message","messageId":"5d425745-12da-4c36-bbb6-d0eb97659fcc","parts":[{"kind":"text","text":"slow:20:200 count for me"}],"role":"user","taskId":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c"}],"id":"6b1002dc-fd50-45e7-92ea-ee1d6a99ef3c","kind":"task","status":{"state":"canceled","timestamp":"2026-12-02T14:22:19.984255Z"}}}"#;
/// v1.0 stream of a task the client cancelled.
pub const V10_CANCELED_STREAM: &str = r#"data: {"result": {"task": {"id": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "c3607a3c-484b-42b8-8543-14a486bee1ac", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "role": "ROLE_USER", "parts": [{"text": "slow:20:200 count for me"}]}]}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:20.301490Z"}}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": "w1 "}]}}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "artifact": {"artifactId": "answer", "parts": [{"text": "w2 "}]}, "append": true}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"artifactUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "artifact": {"artifactId": "answer", "parts": [{"text": "w3 "}]}, "append": true}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "7a1ee2a1-8f62-40ca-90ce-e2171c50efcc", "contextId": "293d5160-d90d-4c58-bede-5083776f82fa", "status": {"state": "TASK_STATE_CANCELED", "timestamp": "2026-12-02T14:22:21.341398Z"}}}, "id": "v10_SendStreamingMessage_slow_then_canceled", "jsonrpc": "2.0"}

"#;
/// v1.0 `GetTask` of that task afterwards.
pub const V10_GET_AFTER_CANCEL: &str = r#"{"result":{"id":"7a1ee2a1-8f62-40ca-90ce-e2171c50efcc","contextId":"293d5160-d90d-4c58-bede-5083776f82fa","status":{"state":"TASK_STATE_CANCELED","timestamp":"2026-12-02T14:22:21.341398Z"},"artifacts":[{"artifactId":"answer","name":"answer","parts":[{"text":"w1 "},{"text":"w2 "},{"text":"w3 "}]}],"history":[{"messageId":"c3607a3c-484b-42b8-8543-14a486bee1ac","contextId":"293d5160-d90d-4c58-bede-5083776f82fa","taskId":"7a1ee2a1-8f62-40ca-90ce-e2171c50efcc","role":"ROLE_USER","parts":[{"text":"slow:20:200 count for me"}]}]},"id":"v10_GetTask_after_cancel","jsonrpc":"2.0"}"#;
/// v0.3 `message/send`.
pub const V03_SEND: &str = r#"{"id":"v03_message_send_turn1","jsonrpc":"2.0","result":{"artifacts":[{"artifactId":"answer","name":"answer","parts":[{"kind":"text","text":"You "},{"kind":"text","text":"said: "},{"kind":"text","text":"My "},{"kind":"text","text":"project "},{"kind":"text","text":"is "},{"kind":"text","text":"named "},{"kind":"text","text":"zebra42."}]}],"contextId":"947dcfa1-61ec-46d2-9271-28ef90d74e0c","history":[{"contextId":"947dcfa1-61ec-46d2-9271-28ef90d74e0c","kind":"message","messageId":"db5e0908-7a71-42d8-aa04-2607b65670aa","parts":[{"kind":"text","text":"My project is named zebra42."}],"role":"user","taskId":"56a56506-cc71-4034-bd12-3fbf3948a024"}],"id":"56a56506-cc71-4034-bd12-3fbf3948a024","kind":"task","status":{"message":{"contextId":"947dcfa1-61ec-46d2-9271-28ef90d74e0c","kind":"message","messageId":"e39086da-dd38-4af9-81a6-3ed8baf15628","parts":[{"kind":"text","text":"You said: My project is named zebra42."}],"role":"agent","taskId":"56a56506-cc71-4034-bd12-3fbf3948a024"},"state":"completed","timestamp":"2026-12-02T14:22:18.647056Z"}}}"#;
/// v1.0 `SendMessage`.
pub const V10_SEND: &str = r#"{"result":{"task":{"id":"c4227bb9-5139-45fc-850e-a93679687554","contextId":"dc2c1530-bdd9-4d09-a490-8a093190b1d4","status":{"state":"TASK_STATE_COMPLETED","message":{"messageId":"bd94c50f-f28c-495f-900b-d99aef8b0e9f","contextId":"dc2c1530-bdd9-4d09-a490-8a093190b1d4","taskId":"c4227bb9-5139-45fc-850e-a93679687554","role":"ROLE_AGENT","parts":[{"text":"You said: My project is named zebra42."}]},"timestamp":"2026-12-02T14:22:18.801113Z"},"artifacts":[{"artifactId":"answer","name":"answer","parts":[{"text":"You "},{"text":"said: "},{"text":"My "},{"text":"project "},{"text":"is "},{"text":"named "},{"text":"zebra42."}]}],"history":[{"messageId":"f085c257-ff19-44ca-b09c-9aaca8ef32b7","contextId":"dc2c1530-bdd9-4d09-a490-8a093190b1d4","taskId":"c4227bb9-5139-45fc-850e-a93679687554","role":"ROLE_USER","parts":[{"text":"My project is named zebra42."}]}]}},"id":"v10_SendMessage_turn1","jsonrpc":"2.0"}"#;
/// v1.0 stream of a task that failed (the agent's LLM answered 500).
pub const V10_FAILED_STREAM: &str = r#"data: {"result": {"task": {"id": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "m-err2", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "taskId": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "role": "ROLE_USER", "parts": [{"text": "please error"}]}]}}, "id": 1, "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:30.585270Z"}}}, "id": 1, "jsonrpc": "2.0"}

data: {"result": {"statusUpdate": {"taskId": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "status": {"state": "TASK_STATE_FAILED", "message": {"messageId": "2fa913b7-1903-41d3-90cf-799bf268fa4d", "contextId": "803141c8-6293-491c-bf72-db7b5816e3b0", "taskId": "5625027d-8a82-47ba-9bb6-55d8f0328d66", "role": "ROLE_AGENT", "parts": [{"text": "LLM error: Server error '500 Internal Server Error' for url 'http://127.0.0.1:42927/v1/chat/completions'\nFor more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/500"}]}, "timestamp": "2026-12-02T14:22:30.620922Z"}}}, "id": 1, "jsonrpc": "2.0"}

"#;
/// v1.0 `GetTask` of an unknown task.
pub const V10_NOT_FOUND: &str = r#"{"error":{"code":-32001,"message":"Task not found","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_FOUND","domain":"a2a-protocol.org","metadata":{}}]},"id":"v10_GetTask_unknown","jsonrpc":"2.0"}"#;
/// v1.0 `SubscribeToTask` of a finished task: JSON, not SSE.
pub const V10_SUBSCRIBE_FINISHED: &str = r#"{"error":{"code":-32004,"message":"Task 4c71c714-2e87-4cd4-816e-07512230289f is in terminal state: TASK_STATE_COMPLETED","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"UNSUPPORTED_OPERATION","domain":"a2a-protocol.org","metadata":{}}]},"id":"v10_SubscribeToTask_finished","jsonrpc":"2.0"}"#;
/// v1.0 HTTP+JSON `message:stream`.
pub const REST10_STREAM: &str = r#"data: {"task": {"id": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "ecc5873c-cdd0-40ba-8b77-009a5869fbb9", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "role": "ROLE_USER", "parts": [{"text": "What is my project named?"}]}]}}

data: {"statusUpdate": {"taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:27.462161Z"}}}

data: {"artifactUpdate": {"taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": "zebra42"}]}, "lastChunk": true}}

data: {"statusUpdate": {"taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "bc559071-134d-4f72-adf8-97bc15d04f94", "contextId": "4c06c2f6-1aad-432b-8fcc-f3a685c1b761", "taskId": "4c21fcae-ec5a-48aa-8c6b-589c4cd20b38", "role": "ROLE_AGENT", "parts": [{"text": "zebra42"}]}, "timestamp": "2026-12-02T14:22:27.495234Z"}}}

"#;
/// v0.3 HTTP+JSON `v1/message:stream`.
pub const REST03_STREAM: &str = r#"data: {"task": {"id": "98643f83-eee4-4160-9383-41b16e5740cc", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "ada43a33-d739-4ffe-816a-1aa7cb4f79e8", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "role": "ROLE_USER", "content": [{"text": "What is my project named?"}]}]}}

data: {"statusUpdate": {"taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-12-02T14:22:29.043056Z"}}}

data: {"artifactUpdate": {"taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": "zebra42"}]}, "lastChunk": true}}

data: {"statusUpdate": {"taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "status": {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "8920a1bc-b86e-4fba-ae43-16247eeb60e0", "contextId": "c479e649-6224-44c1-be0e-a6da6dc02dd1", "taskId": "98643f83-eee4-4160-9383-41b16e5740cc", "role": "ROLE_AGENT", "content": [{"text": "zebra42"}]}, "timestamp": "2026-12-02T14:22:29.070375Z"}, "final": true}}

"#;
/// the agent card.
pub const CARD: &str = r#"{"name":"Tether test A2A agent","description":"Answers from the conversation of its contextId, kept in memory only.","supportedInterfaces":[{"url":"http://127.0.0.1:47001/","protocolBinding":"JSONRPC","protocolVersion":"1.0"},{"url":"http://127.0.0.1:47001/rest","protocolBinding":"HTTP+JSON","protocolVersion":"1.0"},{"url":"http://127.0.0.1:47001/","protocolBinding":"JSONRPC","protocolVersion":"0.3"},{"url":"http://127.0.0.1:47001/rest","protocolBinding":"HTTP+JSON","protocolVersion":"0.3"}],"version":"1.0.0","capabilities":{"streaming":true,"pushNotifications":false},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[{"id":"chat","name":"Chat","description":"Remembers 'My project is named X'; answers 'What is my project named?'","tags":["test"],"examples":["My project is named zebra42.","What is my project named?"]}],"additionalInterfaces":[{"transport":"HTTP+JSON","url":"http://127.0.0.1:47001/rest"}],"preferredTransport":"JSONRPC","protocolVersion":"0.3","url":"http://127.0.0.1:47001/"}"#;
