"""The web application behind `yunque serve`: llama.cpp's OpenAI-compatible server on the
exports, the chat page and the ratings it records (app), the refusals and adjustments before
llama.cpp (limits), the front that outlives an engine crash (front), and which file a served
model is (models). It uses the stages (an export's lineage) and is not one; never Dagster."""
