"""Dataset tools (the BIRD converter): installed with the project, never imported by the runtime."""
