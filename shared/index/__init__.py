"""The search index: the engine interface, the qdrant-client and Qdrant Edge engines, embeddings."""
