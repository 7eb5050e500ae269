"""A LangGraph graph that asks a person before it runs a tool: `interrupt()`.

Test fixture for approvals through Tether (gateway/tests/e2e/approvals.rs). A user message
holding `approve:NAME` stops the graph at `interrupt({"tool": NAME, "arguments": {"x": 1},
"question": ...})`; the run resumed with `Command(resume={"decision": "approve"|"reject",
"arguments"?, "comment"?})` runs the tool (appending `{"tool", "arguments"}` to the file
$APPROVAL_TOOL_LOG, which outlives the process) when approved, and answers "NAME ran with
ARGS" or "NAME was not run: COMMENT". Any other message is answered "You said: TEXT". No
LLM: the decision is the whole point.
"""

import json
import os
import re

from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt


def text_of(message) -> str:
    content = message.content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def ask(state: MessagesState) -> dict:
    last = text_of(state["messages"][-1])
    wanted = re.search(r"approve:(\w+)", last)
    if not wanted:
        return {"messages": [AIMessage(f"You said: {last}")]}
    tool = wanted.group(1)
    decision = interrupt({"tool": tool, "arguments": {"x": 1}, "question": f"Run {tool}?"})
    if isinstance(decision, dict) and decision.get("decision") == "approve":
        arguments = decision.get("arguments") or {"x": 1}
        with open(os.environ["APPROVAL_TOOL_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")
        return {"messages": [AIMessage(f"{tool} ran with {json.dumps(arguments)}")]}
    comment = (decision or {}).get("comment") if isinstance(decision, dict) else None
    return {"messages": [AIMessage(f"{tool} was not run: {comment or 'rejected'}")]}


builder = StateGraph(MessagesState)
builder.add_node("ask", ask)
builder.add_edge(START, "ask")
graph = builder.compile()
