"""Model and tokenizer creation: the tiny Qwen3-MoE used on CPU, and loading any
Hugging Face MoE causal LM from a directory."""
