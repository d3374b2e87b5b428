"""Embeddings through fastembed: a dense model and Qdrant's BM25 (DESIGN §4).

Each model is loaded once per process and reused. Offline machines set
``MEMARC_DENSE_MODEL_PATH`` / ``MEMARC_BM25_MODEL_PATH`` (``specific_model_path`` +
``local_files_only``); otherwise fastembed downloads from its model hub. Embedding is CPU-bound:
the async helpers run it in a worker thread (onnxruntime releases the GIL) so a process that also
serves HTTP keeps answering. BM25 uses the workspace language's Snowball stemmer and no stopword
list (Qdrant's IDF modifier already discounts common words).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from shared.config import Settings
from shared.errors import EmbedderUnavailable
from shared.index.engine import ARCHIVE_DENSE, ARCHIVE_SPARSE, SparseVector, VectorLayout
from shared.models import Language

BM25_MODEL = "Qdrant/bm25"
#: A dense model as fastembed loads it: its model id and the local folder of its files (None:
#: fastembed's cache or hub). A workspace's index records the one its collection was built with
#: (migration 025: a shadow rebuild can build with another); None everywhere means the process's
#: configured model for the language (:meth:`Settings.dense_model_for`).
ModelKey = tuple[str, str | None]
#: The Snowball stemmer of each workspace language (:data:`shared.models.LANGUAGES`).
STEMMERS: dict[Language, str] = {"en": "english", "it": "italian"}
#: texts per dense batch (sorted by length, so a batch pads little)
DENSE_BATCH = 16
#: estimated tokens per dense batch, padding included (texts x the longest's estimate): the
#: model's activations grow with batch x length (attention with batch x length^2), and
#: onnxruntime keeps what its largest batch needed. 16 texts at the 512-token context held
#: 200 MB for one attention tensor alone; this budget gives 4 such texts a batch and leaves
#: batches of short texts at :data:`DENSE_BATCH` (``bench/worker_memory.py``, issue 25)
DENSE_BATCH_TOKENS = 2048
#: characters per token assumed by the estimate: low (English prose is ~4, SQL ~3), so a batch
#: is cut early rather than late
CHARS_PER_TOKEN = 3
#: onnxruntime's CPU memory arena for the document sessions: off, so the memory of a long batch
#: goes back to the allocator when the batch ends instead of staying reserved by the session
#: (fastembed passes ``enable_cpu_mem_arena`` to the session options)
DOCUMENT_ARENA = False
#: added to a model-loading error when no local model folder is configured (an offline machine
#: cannot reach fastembed's model hub)
OFFLINE_HINT = (" (no local model folder is configured: on a machine without access to the model "
                "hub, set MEMARC_DENSE_MODEL_PATH and MEMARC_BM25_MODEL_PATH to the model folders, "
                "as `make demo` does with ../shared/models; see docs/settings.md)")


class Embedder:
    """Dense + BM25 embedding with models loaded lazily, once, and shared by all callers.

    The dense model of a workspace language is :meth:`Settings.dense_model_for` (one model for
    every language unless ``MEMARC_DENSE_MODEL_IT`` names another for ``it``); BM25 uses the
    language's Snowball stemmer.

    :param settings: model ids, paths and thread count.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.dense_model_id = settings.dense_model
        self._dense: dict[tuple[str, str | None], Any] = {}
        self._pools: dict[tuple[str, str | None], list[Any]] = {}
        self._sessions = max(1, settings.embed_threads)
        #: runs the pool's sessions at once (threads start on first use and are reused)
        self._pool_threads = ThreadPoolExecutor(max_workers=self._sessions,
                                                thread_name_prefix="memarc-embed")
        self._dimensions: dict[tuple[str, str | None], int] = {}
        self._dense_files: dict[tuple[str, str | None], str | None] = {}
        self._sparse: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._embed_lock = threading.Lock()
        self._fingerprints: dict[tuple[str, ModelKey], str] = {}

    def key(self, language: str, model: ModelKey | None = None) -> ModelKey:
        """The dense model used for ``language``: ``model`` when given (a workspace's recorded
        or a shadow rebuild's model), else the process's configured one."""
        return model if model is not None else self.settings.dense_model_for(language)

    @property
    def dimension(self) -> int | None:
        """The dimension of the default dense model once it is loaded (None before)."""
        return self._dimensions.get((self.settings.dense_model, self.settings.dense_model_path))

    def _load_dense(self, language: str = "en", model: ModelKey | None = None) -> Any:
        """The language's dense model as one fastembed session of ``embed_threads`` intra-op
        threads, loaded once: it embeds queries (one short text, where intra-op threads help:
        p50 8.7 ms against 12.1 ms on one thread here) and gives the dimension and fingerprint.

        :raises EmbedderUnavailable: the model cannot be loaded.
        """
        key = self.key(language, model)
        if key not in self._dense:
            with self._lock:
                if key not in self._dense:
                    model = self._new_dense(key, self.settings.embed_threads)
                    self._dimensions[key] = len(next(iter(model.embed(["dimension probe"]))))
                    self._dense_files[key] = _folder_digest(_model_dir(model))
                    self._dense[key] = model
        return self._dense[key]

    def _dense_pool(self, language: str = "en", model: ModelKey | None = None) -> list[Any]:
        """The language's dense model as ``embed_threads`` more sessions of one onnxruntime
        thread each, loaded on the first document call: documents are embedded on all of them
        at once (:meth:`embed_dense_sync`). Independent single-threaded sessions keep the cores
        busy when other processes take some of them, where one session's intra-op threads wait
        on each other (``bench/embed_sessions.py``: 1.36-1.50x under load, level on an idle
        machine).

        :raises EmbedderUnavailable: the model cannot be loaded.
        """
        key = self.key(language, model)
        self._load_dense(language, model)
        if key not in self._pools:
            with self._lock:
                if key not in self._pools:
                    self._pools[key] = [self._new_dense(key, 1, arena=DOCUMENT_ARENA)
                                        for _ in range(self._sessions)]
        return self._pools[key]

    @staticmethod
    def _new_dense(key: tuple[str, str | None], threads: int, arena: bool = True) -> Any:
        from fastembed import TextEmbedding

        name, path = key
        kwargs: dict[str, Any] = {"threads": threads, "enable_cpu_mem_arena": arena}
        if path:
            kwargs.update(specific_model_path=path, local_files_only=True)
        try:
            return TextEmbedding(name, **kwargs)
        except Exception as exc:  # fastembed raises plain ValueError/OSError/...
            raise EmbedderUnavailable(f"cannot load dense model {name!r}: {exc}"
                                      f"{'' if path else OFFLINE_HINT}") from exc

    def _load_sparse(self, language: str) -> Any:
        lang = STEMMERS.get(language, "english")  # type: ignore[call-overload]
        if lang not in self._sparse:
            with self._lock:
                if lang not in self._sparse:
                    from fastembed import SparseTextEmbedding

                    kwargs: dict[str, Any] = {"language": lang}
                    if self.settings.bm25_model_path:
                        kwargs.update(specific_model_path=self.settings.bm25_model_path,
                                      local_files_only=True)
                    try:
                        self._sparse[lang] = SparseTextEmbedding(BM25_MODEL, **kwargs)
                    except Exception as exc:
                        hint = "" if self.settings.bm25_model_path else OFFLINE_HINT
                        raise EmbedderUnavailable(f"cannot load {BM25_MODEL}: {exc}{hint}") from exc
        return self._sparse[lang]

    def load(self, languages: tuple[str, ...] = ("en",)) -> None:
        """Load the models of these workspace languages now (otherwise on first use).

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        for lang in languages:
            self._load_dense(lang)
            self._load_sparse(lang)

    def dense_dimension(self, language: str = "en", model: ModelKey | None = None) -> int:
        """Dimension of the dense model of ``language`` (or ``model``; loads it)."""
        self._load_dense(language, model)
        return self._dimensions[self.key(language, model)]

    def fingerprint(self, language: str, model: ModelKey | None = None) -> str:
        """A fingerprint of what turns text into this process's vectors for ``language``:
        ``sha256:<hex>`` over the dense model id, its dimension and the SHA-256 of every file of
        the model folder fastembed loaded (names, sizes, contents), and BM25's configuration
        (model, Snowball language, k, b, average length, token length, stemmer switch and the
        stopword list). Two processes give the same fingerprint exactly when their vectors are
        interchangeable; a collection records it and refuses other vectors (DESIGN §4).

        ``model``: another dense model than the configured one (see :data:`ModelKey`).

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        key = self.key(language, model)
        if (language, key) in self._fingerprints:
            return self._fingerprints[language, key]
        self._load_dense(language, model)
        bm25 = self._load_sparse(language)
        config = {
            "dense": {"model": key[0], "dimension": self._dimensions[key],
                      "files": self._dense_files[key]},
            "bm25": {"model": BM25_MODEL, "language": getattr(bm25.model, "language", None),
                     **{k: getattr(bm25.model, k, None)
                        for k in ("k", "b", "avg_len", "token_max_length", "disable_stemmer")},
                     "stopwords": sorted(getattr(bm25.model, "stopwords", None) or ())},
        }
        blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
        self._fingerprints[language, key] = "sha256:" + hashlib.sha256(blob).hexdigest()
        return self._fingerprints[language, key]

    def layout(self, language: str, dense: tuple[str, ...] = ARCHIVE_DENSE,
               sparse: tuple[str, ...] = ARCHIVE_SPARSE,
               model: ModelKey | None = None) -> VectorLayout:
        """The vector layout of a collection this process writes or reads for a workspace in
        ``language``: the named vectors, the language's dense model and dimension, and
        :meth:`fingerprint` (of ``model`` when given, see :data:`ModelKey`).

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        return VectorLayout(dense=dense, sparse=sparse,
                            dimension=self.dense_dimension(language, model),
                            dense_model=self.key(language, model)[0],
                            fingerprint=self.fingerprint(language, model))

    def embed_dense_sync(self, texts: list[str], language: str = "en",
                         model: ModelKey | None = None) -> list[list[float]]:
        """Dense vectors (L2-normalised floats) of documents with the language's model, in
        order: small batches sorted by length (padding to the longest text of a batch dominates
        the cost: measured 1.7-2x faster on the BIRD cards) and bounded by estimated tokens
        (:func:`dense_batches`), the batches dealt out in turn to the sessions of
        :meth:`_dense_pool`, which run at once in threads (onnxruntime releases the GIL); one
        call at a time per process, so concurrent jobs do not oversubscribe the cores. The heap
        the call freed goes back to the system (:func:`trim_heap`)."""
        pool = self._dense_pool(language, model)
        batches = dense_batches(texts, _max_tokens(pool[0]))
        out: list[list[float]] = [[]] * len(texts)

        def run(model: Any, share: list[list[int]]) -> None:
            for batch in share:
                vectors = model.embed([texts[i] for i in batch], batch_size=len(batch))
                for i, vector in zip(batch, vectors):
                    out[i] = vector.tolist()

        with self._embed_lock:
            try:
                for f in [self._pool_threads.submit(run, model, batches[n::len(pool)])
                          for n, model in enumerate(pool) if batches[n::len(pool)]]:
                    f.result()
            finally:
                trim_heap()
        return out

    def embed_sparse_sync(self, texts: list[str], language: str) -> list[SparseVector]:
        """BM25 vectors of documents in the workspace language, in order."""
        model = self._load_sparse(language)
        with self._embed_lock:
            vectors = list(model.embed(texts, batch_size=256))
        return [SparseVector(e.indices.tolist(), e.values.tolist()) for e in vectors]

    def embed_documents_sync(self, texts: list[str], language: str) -> tuple[list[list[float]], list[SparseVector]]:
        """Dense vectors and BM25 vectors of the same documents, in order (see
        :meth:`embed_dense_sync` and :meth:`embed_sparse_sync`)."""
        return self.embed_dense_sync(texts, language), self.embed_sparse_sync(texts, language)

    def embed_query_sync(self, text: str, language: str,
                         model: ModelKey | None = None) -> tuple[list[float], SparseVector]:
        """Dense and BM25 query vectors for one query text (dense: ``model`` when given)."""
        dense = next(iter(self._load_dense(language, model).query_embed(text))).tolist()
        e = next(iter(self._load_sparse(language).query_embed(text)))
        return dense, SparseVector(e.indices.tolist(), e.values.tolist())

    async def embed_documents(self, texts: list[str], language: str) -> tuple[list[list[float]], list[SparseVector]]:
        """:meth:`embed_documents_sync` in a worker thread.

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        return await asyncio.to_thread(self.embed_documents_sync, texts, language)

    async def embed_texts(self, dense_texts: list[str], sparse_texts: list[str],
                          language: str, model: ModelKey | None = None
                          ) -> tuple[list[list[float]], list[SparseVector]]:
        """Dense vectors of ``dense_texts`` (with ``model`` when given) and BM25 vectors of
        ``sparse_texts`` (one worker thread, one dense call over all the dense texts).

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        def run() -> tuple[list[list[float]], list[SparseVector]]:
            return (self.embed_dense_sync(dense_texts, language, model),
                    self.embed_sparse_sync(sparse_texts, language))

        return await asyncio.to_thread(run)

    async def embed_query(self, text: str, language: str,
                          model: ModelKey | None = None) -> tuple[list[float], SparseVector]:
        """:meth:`embed_query_sync` in a worker thread.

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        return await asyncio.to_thread(self.embed_query_sync, text, language, model)


def dense_batches(texts: list[str], max_tokens: int = 512) -> list[list[int]]:
    """Indices of ``texts`` cut into dense batches, shortest texts first: at most
    :data:`DENSE_BATCH` texts, and at most :data:`DENSE_BATCH_TOKENS` estimated tokens once
    padded to the batch's longest text (a text is ``len / CHARS_PER_TOKEN`` tokens, at most
    ``max_tokens``, the model's context: the tokenizer truncates there). A text alone is always
    a batch, however long."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    batches: list[list[int]] = []
    for i in order:
        tokens = min(max_tokens, len(texts[i]) // CHARS_PER_TOKEN + 2)  # + [CLS] and [SEP]
        batch = batches[-1] if batches else None
        if (batch is None or len(batch) >= DENSE_BATCH
                or (len(batch) + 1) * tokens > DENSE_BATCH_TOKENS):
            batches.append([i])
        else:
            batch.append(i)
    return batches


def _max_tokens(model: Any) -> int:
    """The context (tokens) at which fastembed's tokenizer truncates a dense model's input
    (512 when the model does not say)."""
    truncation = getattr(getattr(model, "model", None), "tokenizer", None)
    truncation = getattr(truncation, "truncation", None) or {}
    return int(truncation.get("max_length") or 512)


def trim_heap() -> None:
    """Give the C heap's free memory back to the system (glibc ``malloc_trim(0)``; nothing
    elsewhere). A batch of long texts frees hundreds of MB that glibc otherwise keeps mapped in
    the arenas of the threads that used it, so the process would stay at its largest batch."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _load_libc() -> Any:
    """glibc through ctypes, or None (another C library, or no ``malloc_trim``)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()


def _model_dir(model: Any) -> Path | None:
    """The folder fastembed loaded a dense model from (``specific_model_path`` or its cache)."""
    folder = getattr(getattr(model, "model", None), "_model_dir", None)
    return Path(folder) if folder else None


def _folder_digest(folder: Path | None) -> str | None:
    """SHA-256 over every regular file below ``folder`` (relative name, size, content), sorted by
    name; None when fastembed did not say where the model lives."""
    if folder is None or not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
