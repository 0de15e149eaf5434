"""A local LLM server for tests: speaks the Anthropic Messages (``POST /v1/messages``) and OpenAI
Chat Completions (``POST /v1/chat/completions``) wire formats on 127.0.0.1, so the real SDKs
talk to it over HTTP. It records every request and follows a scripted fault plan.

Answers are deterministic and name the chunk they answer: ``"Context for: <first five words of
the chunk>."``. The chunk is the text after the prompt's last ``<chunk>`` tag (chunkline
escapes any tag inside the document, so the last one is the prompt's own).

Prompt caching is simulated so that usage reconciles: Anthropic, everything up to and including
a ``cache_control`` block is cached on first sight (``cache_creation_input_tokens``) and read
afterwards (``cache_read_input_tokens``); OpenAI, the prompt before ``<chunk>`` counts as
``prompt_tokens_details.cached_tokens`` once seen. Tokens are whitespace-separated words.

    with LLMServer(expected_key="sk-test") as server:
        server.faults = [Fault("alpha", status=429, times=2, retry_after="0.2")]
        anthropic.Anthropic(base_url=server.url, api_key="sk-test", ...)
        openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", ...)
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET_HEADERS = {"authorization", "x-api-key"}


@dataclass
class Fault:
    """What the server does to requests whose chunk contains ``match``.

    status: answer with this HTTP status (429, 500, 400, ...) instead of a completion.
    times: apply to the first ``times`` matching requests only; None: to all of them.
    retry_after / retry_after_ms: header values sent with the error.
    delay_s: sleep this long before answering (a slow server; the client may time out).
    answer_words: answer with this many words, ignoring ``max_tokens`` (a misbehaving server).
    answer: answer with exactly this text.
    """

    match: str
    status: int | None = None
    times: int | None = None
    retry_after: str | None = None
    retry_after_ms: str | None = None
    delay_s: float = 0.0
    answer_words: int | None = None
    answer: str | None = None
    used: int = 0


@dataclass(frozen=True)
class Recorded:
    """One request as received: secret headers removed (``key_ok`` says whether the expected key
    came with it), the JSON body, arrival time (``time.monotonic()``), the chunk it asked about
    and the status answered."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    chunk: str
    key_ok: bool
    status: int = 200
    usage: dict[str, int] = field(default_factory=dict)  # what the answer reported


def _words(text: str) -> int:
    return len(text.split())


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [part.get("text", "") for part in content or [] if isinstance(part, dict)]


def chunk_of(prompt: str) -> str:
    """The chunk a prompt asks about: after the last ``<chunk>``, before ``</chunk>``."""
    at = prompt.rfind("<chunk>")
    if at < 0:
        return prompt
    rest = prompt[at + len("<chunk>"):]
    end = rest.find("</chunk>")
    return (rest if end < 0 else rest[:end]).strip()


def answer_for(chunk: str) -> str:
    return "Context for: " + " ".join(chunk.split()[:5]) + "."


class LLMServer:
    """Start with ``with LLMServer() as server`` (or start()/stop()); ``url`` is its base URL."""

    def __init__(self, expected_key: str | None = None) -> None:
        self.expected_key = expected_key
        self.faults: list[Fault] = []
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._anthropic_cache: set[str] = set()
        self._openai_cache: set[str] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle

    def start(self) -> LLMServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def reset(self) -> None:
        """Forget requests, faults and the simulated prompt caches."""
        with self._lock:
            self.faults = []
            self.requests = []
            self._anthropic_cache.clear()
            self._openai_cache.clear()

    def requests_for(self, match: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if match in r.chunk]

    # --- behaviour

    def _fault(self, chunk: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.match in chunk and (fault.times is None or fault.used < fault.times):
                    fault.used += 1
                    return fault
        return None

    def handle(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any], float]:
        """(status, extra headers, JSON answer, delay) for one request; records it."""
        anthropic = path.rstrip("/").endswith("/v1/messages")
        prompt = "\n".join(t for m in body.get("messages", []) if m.get("role") != "system"
                           for t in _texts(m.get("content")))
        # Anthropic's API takes x-api-key; its SDK sends the key as a bearer token (as OpenAI's).
        auth = headers.get("authorization", "")
        sent_key = headers.get("x-api-key") or (auth[len("Bearer "):] if auth.startswith("Bearer ") else None)
        chunk = chunk_of(prompt)
        key_ok = self.expected_key is None or sent_key == self.expected_key
        fault = self._fault(chunk) if key_ok else None
        status = 401 if not key_ok else (fault.status if fault and fault.status else 200)
        visible = {k: v for k, v in headers.items() if k.lower() not in SECRET_HEADERS}
        record = Recorded(path, visible, body, time.monotonic(), chunk, key_ok, status)
        status, extra, answer, delay = self._answer(anthropic, status, fault, body, chunk, prompt)
        with self._lock:
            self.requests.append(dataclasses.replace(record, usage=dict(answer.get("usage") or {})))
        return status, extra, answer, delay

    def _answer(self, anthropic: bool, status: int, fault: Fault | None, body: dict[str, Any],
                chunk: str, prompt: str) -> tuple[int, dict[str, str], dict[str, Any], float]:
        delay = fault.delay_s if fault else 0.0
        if status != 200:
            extra = {}
            if fault and fault.retry_after is not None:
                extra["retry-after"] = fault.retry_after
            if fault and fault.retry_after_ms is not None:
                extra["retry-after-ms"] = fault.retry_after_ms
            return status, extra, _error_body(anthropic, status), delay
        if fault and fault.answer is not None:
            text = fault.answer
        elif fault and fault.answer_words:
            text = answer_for(chunk) + " " + " ".join(f"filler{i}" for i in range(fault.answer_words))
        else:
            text = " ".join(answer_for(chunk).split()[: body.get("max_tokens") or None])
        if anthropic:
            return 200, {}, self._anthropic_answer(body, text), delay
        return 200, {}, self._openai_answer(body, text, prompt), delay

    def _anthropic_answer(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        system = "\n".join(_texts(body.get("system")))
        blocks = [(block_text, bool(isinstance(part, dict) and part.get("cache_control")))
                  for m in body.get("messages", []) for part in (
                      m.get("content") if isinstance(m.get("content"), list)
                      else [{"type": "text", "text": m.get("content", "")}])
                  for block_text in [part.get("text", "") if isinstance(part, dict) else ""]]
        last_cached = max((i for i, (_, cached) in enumerate(blocks) if cached), default=-1)
        prefix = system + "\x00" + "\x00".join(t for t, _ in blocks[: last_cached + 1])
        prefix_tokens = _words(system) + sum(_words(t) for t, _ in blocks[: last_cached + 1])
        rest_tokens = sum(_words(t) for t, _ in blocks[last_cached + 1:])
        created = read = 0
        if last_cached >= 0:
            with self._lock:
                if prefix in self._anthropic_cache:
                    read = prefix_tokens
                else:
                    self._anthropic_cache.add(prefix)
                    created = prefix_tokens
            input_tokens = rest_tokens
        else:
            input_tokens = prefix_tokens + rest_tokens
        return {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": _words(text),
                "cache_creation_input_tokens": created,
                "cache_read_input_tokens": read,
            },
        }

    def _openai_answer(self, body: dict[str, Any], text: str, prompt: str) -> dict[str, Any]:
        system = "\n".join(t for m in body.get("messages", []) if m.get("role") == "system"
                           for t in _texts(m.get("content")))
        before_chunk = system + "\x00" + prompt[: prompt.rfind("<chunk>")]
        total = _words(system) + _words(prompt)
        with self._lock:
            cached = _words(before_chunk.replace("\x00", " ")) if before_chunk in self._openai_cache else 0
            self._openai_cache.add(before_chunk)
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": total,
                "completion_tokens": _words(text),
                "total_tokens": total + _words(text),
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }


def _error_body(anthropic: bool, status: int) -> dict[str, Any]:
    kind = {401: "authentication_error", 429: "rate_limit_error", 400: "invalid_request_error"}.get(
        status, "api_error")
    if anthropic:
        return {"type": "error", "error": {"type": kind, "message": f"injected {status}"}}
    return {"error": {"message": f"injected {status}", "type": kind, "code": None}}


class _Handler(BaseHTTPRequestHandler):
    owner: LLMServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect

    def do_POST(self) -> None:  # http.server's naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        if not (self.path.rstrip("/").endswith("/v1/messages")
                or self.path.rstrip("/").endswith("/chat/completions")):
            self._send(404, {}, {"error": {"message": "not found"}})
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, extra, answer, delay = self.owner.handle(self.path, headers, body)
        if delay:
            time.sleep(delay)
        self._send(status, extra, answer)

    def _send(self, status: int, extra: dict[str, str], answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left; it will retry

    def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
        pass
