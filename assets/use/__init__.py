"""Use and feedback: exported_model (Hugging Face and GGUF), and human_preferences (the chat page's ratings)."""
