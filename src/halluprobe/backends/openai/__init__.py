"""The openai backend: OpenAI-compatible servers (backend.py; transport.py: HTTP and retries; wire.py: request and reply shapes)."""
