# attnflow.integrations — adapters to other libraries (transformers).
