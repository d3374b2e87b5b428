FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends postgresql-client && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY writer ./writer
COPY explorer_plugin ./explorer_plugin
COPY tools ./tools
COPY migrations ./migrations
RUN pip install --no-cache-dir .
USER nobody
EXPOSE 8000 8001
CMD ["memarc", "--help"]
