//! Unit tests for the LangGraph adapter.
