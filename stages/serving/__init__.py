"""`yunque serve`: llama.cpp's OpenAI-compatible server on the exports, the chat page and
the ratings it records (app), the refusals before llama.cpp (limits), and which file a
served model is (models)."""
