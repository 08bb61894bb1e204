# __init__.pyi — stubs of attnflow.integrations (adapters; see transformers.pyi).
