"""A LangGraph graph whose model is Tether's fake LLM (tests/fake_agent.py).

Test fixture for `--protocol langgraph`. `langgraph dev` (in-memory, the LangGraph API
server) serves it as the assistant `agent` from ./langgraph.json. The state is LangGraph's
`MessagesState`; the one node sends the thread's whole message list to the fake LLM through
langchain-openai's `ChatOpenAI` (base URL $FAKE_LLM_URL, e.g. http://127.0.0.1:P/v1), so
the graph "remembers" exactly what the thread's state holds. `langgraph dev` keeps threads
in memory (flushed to .langgraph_api/ in its working directory), so a restart in a fresh
directory forgets every thread: the motivating bug. tests/agents/kagent/kagent_langgraph_agent.py
serves the same graph (`builder`) with kagent's runtime.
"""

import os

from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph

model = ChatOpenAI(
    model="fake-model",
    base_url=os.environ.get("FAKE_LLM_URL", "http://127.0.0.1:8000/v1"),
    api_key="unused",
    streaming=True,
)


async def call_model(state: MessagesState) -> dict:
    return {"messages": [await model.ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("model", call_model)
builder.add_edge(START, "model")
# The server checkpoints it itself (in memory under `langgraph dev`).
graph = builder.compile()
