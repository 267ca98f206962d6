"""`ragpulse demo` and `ragpulse demo-app`: a synthetic RAG company whose retrieval regresses."""
